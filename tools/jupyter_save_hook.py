
# chimera_nb (make install): nbdev's clean on save for a project's source notebooks only (those under its nbs/), so running
# one leaves git status clean, while a user's own notebook (e.g. chimera-playground.ipynb) keeps its outputs.
def chimera_nb_clean_jupyter(path, model, contents_manager=None, **kwargs):
    try:
        from nbdev.clean import clean_jupyter
        from nbdev.config import get_config
    except ModuleNotFoundError: return
    from pathlib import Path
    full = (Path(contents_manager.root_dir) / path if contents_manager is not None else Path(path)).resolve()
    cfg = get_config(path=full.parent)
    if cfg.jupyter_hooks and Path(cfg.nbs_path).resolve() in full.parents:
        clean_jupyter(path=str(full), model=model, contents_manager=contents_manager, **kwargs)

c.ContentsManager.pre_save_hook = chimera_nb_clean_jupyter
