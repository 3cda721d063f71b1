"""chimera_nb.search: properties of searched schedules on random small costs (hypothesis), and a searched schedule
run on the runtime (gloo processes) against the single-process reference, like every fixed schedule.

Run: PYTHONPATH=$PWD .venv/bin/python -m pytest tests/test_search.py -q
"""
import math
import pytest
import torch
from hypothesis import given, settings, strategies as st, HealthCheck
from chimera_nb.ir import Schedule, validate
from chimera_nb.simulate import Costs, simulate
from chimera_nb.search import search_schedule, costs_for, fixed_table, PLACEMENTS
from chimera_nb.launch import launch_local

times = st.integers(1, 8).map(lambda x: x / 4)  # 0.25 .. 2, on a grid CP-SAT scales exactly


@st.composite
def cases(draw):
    D = draw(st.sampled_from([2, 4]))
    N = D * draw(st.sampled_from([1, 2]))
    split = draw(st.booleans())
    f, b = draw(st.lists(times, min_size=D, max_size=D)), draw(st.lists(times, min_size=D, max_size=D))
    w = draw(st.lists(times, min_size=D, max_size=D)) if split else 0.0
    p2p = draw(st.sampled_from([0.0, 0.1, 0.5]))
    memory = draw(st.sampled_from([D / 2 + 1, D, D + 2]))
    placements = draw(st.sampled_from([('single',), ('single', 'v', 'bidirectional'), ('v', 'bidirectional')]))
    method = draw(st.sampled_from(['heuristic', 'auto']))
    return D, N, Costs(f, b, w, p2p=p2p), memory, placements, method


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_searched_schedule_properties(case):
    D, N, costs, memory, placements, method = case
    try: r = search_schedule(D, N, costs, memory=memory, placements=placements, time_limit=0.5, method=method, workers=1)
    except ValueError as e:  # nothing of these placements fits this memory: said so
        assert 'raise the memory' in str(e); return
    s = validate(r.schedule)
    tl = simulate(s, costs_for(costs, s.num_stages))
    assert r.makespan == tl.makespan
    assert max(tl.peak_activations) <= memory + 1e-9 and r.peak <= memory + 1e-9
    assert r.lower_bound <= r.makespan + 1e-9
    assert r.makespan <= r.best_fixed_makespan + 1e-9  # never worse than the best fixed schedule that fits
    assert r.optimal == (r.makespan <= r.lower_bound + 1e-9 * max(1, r.lower_bound))
    for row in fixed_table(D, N, costs):  # the bound holds for every fixed schedule of these placements that fits
        if row['placement'] in placements and row['peak'] <= memory + 1e-9: assert r.lower_bound <= row['makespan'] + 1e-9
    assert Schedule.from_text(s.to_text()) == s


def test_exact_small_case_is_proven_optimal():
    r = search_schedule(4, 8, Costs(1, 2), memory=4, placements=('v',), time_limit=20, workers=1)
    assert r.optimal and r.gap == 0 and r.method == 'cp-sat' and r.makespan < r.best_fixed_makespan


def test_uneven_stages_beat_the_fixed_orders_of_their_placement():
    D, N = 4, 8
    gpt2 = Costs([1, 1, 1, 3], [1, 1, 1, 3], [1, 1, 1, 3], p2p=0.1)
    fixed = {row['schedule']: row['makespan'] for row in fixed_table(D, N, gpt2)}
    r = search_schedule(D, N, gpt2, memory=D, placements=('bidirectional',), time_limit=5, workers=1)
    assert r.makespan < min(fixed['chimera'], fixed['chimera zero-bubble'], fixed['chimera halving'])


def test_large_case_heuristic_is_fast_and_no_worse_than_fixed():
    r = search_schedule(16, 32, Costs(1, 1, 1, p2p=0.1), memory=16, time_limit=2, method='heuristic')
    assert r.makespan <= r.best_fixed_makespan + 1e-9 and r.lower_bound <= r.makespan
    assert r.seconds < 15


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='unknown placements'): search_schedule(4, 8, placements=('ring',))
    with pytest.raises(ValueError, match='time_limit'): search_schedule(4, 8, time_limit=0)
    with pytest.raises(ValueError, match="method must be"): search_schedule(4, 8, method='fast')
    assert set(PLACEMENTS) >= {'single', 'v', 'bidirectional'}


# --- the runtime runs searched schedules exactly (split backward included) ---

def _searched_texts():
    "Searched schedules with split backward in the three placements, on uneven costs, as text (what a job reads)."
    gpt2 = Costs([1, 1, 1, 3], [1, 1, 1, 3], [1, 1, 1, 3], p2p=0.1)
    out = []
    for placement in ('single', 'v', 'bidirectional'):
        r = search_schedule(4, 8, gpt2, memory=4, placements=(placement,), time_limit=2, method='heuristic')
        assert r.schedule.split_backward and r.placement == placement
        out.append(r.schedule.to_text())
    return out


def _run_searched(rank, world, texts, **kw):
    import chimera_nb.testing as T
    out, make = [], T.make_schedule
    for text in texts:
        s = Schedule.from_text(text)
        T.make_schedule = lambda name, D, N, **o: s  # check_against_reference builds the schedule by name: hand it ours
        try: r = T.check_against_reference(rank, world, 'search', s.microbatches, **kw)
        finally: T.make_schedule = make
        r.pop('timeline'); out.append(r)
    return out


@pytest.mark.timeout(300)
def test_searched_schedules_are_exact_on_the_runtime():
    texts = _searched_texts()
    res = launch_local(_run_searched, 4, texts, steps=2, dropout=0.1, dtype=torch.float64, timeout=240)
    for i, text in enumerate(texts):
        per_rank = [r[i] for r in res]
        worst = max(max(r['loss_err'], r['grad_err']) for r in per_rank)
        assert worst < 1e-10, f"searched schedule {i} ({text.splitlines()[0]}): relative error {worst:.3g}"
        held = {}
        for rank, r in enumerate(per_rank):
            for stg, ps in r['params'].items(): held.setdefault(stg, []).append(ps)
        for stg, copies in held.items():  # replicas (bidirectional) hold bit-identical weights after the steps
            assert all(torch.equal(a, b) for c in copies[1:] for a, b in zip(copies[0], c)), f"stage {stg} differs"
