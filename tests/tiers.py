"""The suite's tiers in one place: which Hypothesis profile runs and how large the experiment notebooks are.

- `HYPOTHESIS_PROFILE`: `dev` (the default, `make test`) runs a fifth of each property's examples, at least 10;
  `ci` (`make test-all`, CI) runs each test's full count, the counts the suite has always run.
- `CHIMERA_EXPERIMENT_SIZE`: the experiment notebooks read it (`smoke`: a few steps, `make test`; `small`: the runs
  this machine can afford, `make test-all` and the default; `full`: the users' GPU-cluster sizes)."""
import os
from hypothesis import settings

PROFILES = ('dev', 'ci')
settings.register_profile('ci', deadline=None)
settings.register_profile('dev', deadline=None, max_examples=20)
PROFILE = os.environ.get('HYPOTHESIS_PROFILE', 'dev')
if PROFILE not in PROFILES:
    raise ValueError(f"HYPOTHESIS_PROFILE={PROFILE!r}: choose one of {', '.join(PROFILES)}")
settings.load_profile(PROFILE)


def examples(n:int) -> int:
    "Examples for a property that runs `n` under the ci profile: all of them there, a fifth (at least 10) under dev."
    return n if PROFILE == 'ci' else max(10, n // 5)



EXPERIMENT_SIZES = ('smoke', 'small', 'full')
EXPERIMENT_SIZE = os.environ.setdefault('CHIMERA_EXPERIMENT_SIZE', 'smoke')   # the notebooks run in this process read it
if EXPERIMENT_SIZE not in EXPERIMENT_SIZES:
    raise ValueError(f"CHIMERA_EXPERIMENT_SIZE={EXPERIMENT_SIZE!r}: choose one of {', '.join(EXPERIMENT_SIZES)}")
EXPERIMENTS = ('20_exp_cnn', '21_exp_bert', '22_exp_paper')   # the notebooks that read it

# notebooks the docs test executes in its build (tests/test_docs.py): their run there is their notebook test
DOCS_EXECUTED = ('02_viz',)

# `make test-timing` (CHIMERA_TIMING=1) asserts the wall-clock bounds that `within` names; elsewhere they are printed only,
# so a loaded machine cannot fail a default-tier test. Tests that call it carry the `timed` marker: the timing tier reruns them.
TIMING = os.environ.get('CHIMERA_TIMING') == '1'


def within(took:float, bound:float, what:str):
    "Judge `took` seconds against `bound` in the timing tier; print it everywhere."
    print(f"{what}: {took:.2f} s (bound {bound} s{'' if TIMING else ', judged in the timing tier'})")
    if TIMING: assert took < bound, f"{what} took {took:.1f} s, over its bound of {bound} s"
