"""chimera_nb.search: properties of searched schedules on random small costs (hypothesis), and a searched schedule
run on the runtime (gloo processes) against the single-process reference, like every fixed schedule.

Run: PYTHONPATH=$PWD .venv/bin/python -m pytest tests/test_search.py -q
"""
import math
import pytest
import torch
from hypothesis import given, settings, strategies as st, HealthCheck
from tiers import examples, within   # the Hypothesis profile: fewer examples in make test, all in make test-all
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


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
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


@pytest.mark.timed
def test_large_case_heuristic_is_fast_and_no_worse_than_fixed():
    r = search_schedule(16, 32, Costs(1, 1, 1, p2p=0.1), memory=16, time_limit=2, method='heuristic')
    assert r.makespan <= r.best_fixed_makespan + 1e-9 and r.lower_bound <= r.makespan
    within(r.seconds, 15, 'D=16, N=32 heuristic search (time_limit 2 s)')


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


# --- limits (issue 35): the time limit holds, what this machine cannot hold is refused at once, types are checked ---

import time
from chimera_nb.checks import SpecError


def _one_line(e, *words):
    assert isinstance(e, ValueError) and str(e) and '\n' not in str(e) and len(str(e)) < 400, repr(e)
    for w in words: assert w in str(e), (w, str(e))


@pytest.mark.timing
@pytest.mark.timeout(120)
@pytest.mark.parametrize('limit, method, w_keeps, objective', [(1.0, 'auto', 1.0, 'makespan'), (2.0, 'auto', 1.0, 'makespan'), (2.0, 'exact', 1.0, 'makespan'),
                                                             (1.0, 'auto', 0.5, 'makespan'), (1.0, 'auto', 1.0, 'span'), (5.0, 'auto', 0.5, 'span')])
def test_the_time_limit_holds_on_a_large_case(limit, method, w_keeps, objective):
    """D=64, N=256 with time_limit=1 took 14.6 s (10.7 s with w_keeps or the span objective): now an answer (or, on a machine too
    slow, a refusal) within 1.5x + 5 s, for both objectives and both memory rules.
    The slack: half the limit for the phase in flight when it runs out, 5 s for the answer's simulation and checks."""
    t = time.perf_counter()
    try: r = search_schedule(64, 256, time_limit=limit, method=method, workers=1, progress=False, w_keeps=w_keeps, objective=objective)
    except SpecError as e: _one_line(e, 'time_limit=')
    else: assert r.makespan <= r.best_fixed_makespan + 1e-9 and r.lower_bound <= r.makespan + 1e-9
    assert time.perf_counter() - t < 1.5 * limit + 5


@pytest.mark.timed
@pytest.mark.timeout(60)
def test_sizes_this_machine_cannot_hold_are_refused_at_once():
    for D, N, limit, words in ((256, 1024, 1.0, ['time_limit=1 s allows: give time_limit=']), (10**6, 4, 30.0, ['needs about', 'GiB']),
                               (4, 10**7, 30.0, ['needs about', 'GiB of memory'])):
        t = time.perf_counter()
        with pytest.raises(SpecError) as e: search_schedule(D, N, time_limit=limit, progress=False)
        within(time.perf_counter() - t, 3, f'refusing D={D}, N={N}')
        _one_line(e.value, f"search_schedule(D={D}, N={N})", *words)


@pytest.mark.timed
def test_bad_types_and_limits_are_named_in_one_line():
    for kw, words in ((dict(costs=dict(forward=1, backward=2)), ['costs must be a simulate.Costs, e.g.', 'got dict']),
                      (dict(costs=Costs(1e308, 1e308)), ['costs add up to inf']), (dict(costs=Costs([1e300] * 4, 1)), ['costs add up to']),
                      (dict(memory=True), ['memory must be a number, got bool']), (dict(time_limit=math.nan), ['time_limit must be finite']),
                      (dict(time_limit=math.inf), ['time_limit must be finite']), (dict(time_limit=-1), ['time_limit must be > 0']),
                      (dict(placements=7), ['unknown placements [7]']), (dict(workers=0), ['workers must be >= 1'])):
        t = time.perf_counter()
        with pytest.raises(ValueError) as e: search_schedule(4, 8, **kw)
        within(time.perf_counter() - t, 2, f'refusing {kw}')
        _one_line(e.value, *words)


junk = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
                 st.integers(-3, 10**9), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))


@pytest.mark.timed
@settings(max_examples=examples(30), deadline=None, suppress_health_check=list(HealthCheck))
@given(D=st.one_of(st.sampled_from([2, 4]), junk), N=st.one_of(st.sampled_from([4, 8]), junk),
       memory=st.one_of(st.none(), st.sampled_from([2.0, 4.0]), junk), time_limit=st.one_of(st.sampled_from([0.1, 0.3]), junk),
       method=st.one_of(st.sampled_from(['auto', 'heuristic']), junk), placements=st.one_of(st.sampled_from([('single',), ('v', 'bidirectional')]), junk))
def test_any_arguments_search_or_are_refused_in_one_line(D, N, memory, time_limit, method, placements):
    t = time.perf_counter()
    try: r = search_schedule(D, N, Costs(1, 2, 1), memory=memory, placements=placements, time_limit=time_limit, method=method, workers=1, progress=False)
    except ValueError as e: _one_line(e)
    else:
        assert validate(r.schedule) is not None and r.makespan > 0
        within(time.perf_counter() - t, 1.5 * time_limit + 5, f'a search with time_limit={time_limit}')


# the tuner's own limits

from chimera_nb.autotune import autotune
from chimera_nb.hardware import HARDWARE


@pytest.mark.timed
@pytest.mark.timeout(60)
def test_the_tuner_refuses_what_hung_or_raised_inside():
    kw = dict(model='bert-48', hardware=HARDWARE['b200'], micro_batch_sizes=[2], schedules=['1f1b'])
    for args, extra, words in (((2**40, 64), {}, ['gpus (P) = 1,099,511,627,776 is more than W x D can be']),
                               ((8, math.nan), {}, ['global_batch must be an integer, got float nan']),
                               ((8, 64), dict(search=1, search_time=math.nan), ['search_time must be finite']),
                               ((8, 64), dict(search=1, search_time=-1), ['search_time must be > 0']),
                               ((8, 64), dict(micro_batch_sizes=[2.5]), ['micro-batch size must be an integer'])):
        t = time.perf_counter()
        with pytest.raises(ValueError) as e: autotune(*args, **{**kw, **extra})
        within(time.perf_counter() - t, 3, f'refusing autotune{args}')
        _one_line(e.value, *words)
    t = time.perf_counter(); tu = autotune(2**28, 2**28, **kw)   # the most GPUs a spec can hold: an answer at once (every split refused)
    assert len(tu.ranking) == 0 and len(tu.rejected) > 0
    within(time.perf_counter() - t, 10, 'autotune with every split refused')


@pytest.mark.timing
@pytest.mark.timeout(120)
def test_the_tuner_keeps_its_search_time():
    t = time.perf_counter()
    tu = autotune(8, 64, model='bert-48', hardware=HARDWARE['b200'], micro_batch_sizes=[4], depths=[4], schedules=['1f1b', 'chimera'],
                  search=2, search_time=1.0, progress=False)
    assert tu.ranking.label.str.startswith('searched').any()
    took = time.perf_counter() - t   # two searches of 1 s (each 1.5x + 2 s of slack, as above), 10 s for the ranking
    assert took < 2 * (1.5 * 1.0 + 2) + 10, took


# --- issue 37: the search's second pass ------------------------------------------------------------------------------
@pytest.mark.timed
def test_zero_bubble_greedy_reaches_the_bound_where_list_scheduling_did_not():
    "F = B = W = 1, p2p 0.1, D = N = 16, single placement: the Zero Bubble heuristic's order is optimal (66.0); the search seeds with it."
    r = search_schedule(16, 16, Costs(1, 1, 1, p2p=0.1), memory=16, placements=('single',), time_limit=20, progress=False)
    assert r.makespan == pytest.approx(66.0) and r.optimal, r
    within(r.seconds, 20, 'D = N = 16 single-placement search')


@pytest.mark.timing   # two time-limited local searches compared: how far each gets depends on the machine's load
@pytest.mark.parametrize('costs', [Costs(1, 1, 1, p2p=0.1), Costs([1, 1, 1, 1, 1, 1, 1, 3], 1, 0.5, p2p=0.05)])
def test_more_memory_never_gives_a_worse_answer(costs):
    """The makespan found is monotone in the memory cap over the ladder each search also runs (1F1B's D and ZB-2p's 2D Ma
    below its cap): the small form of D = 32, N = 256 at caps 64 and 131. (Between two caps above the same ladder points the
    time-limited heuristics promise nothing.) Timing tier: the local search stops at its time limit, so a loaded machine
    gets less far in one search than in the other (seen: 220.6 against 219.8 beside two other test workers)."""
    spans = [search_schedule(8, 48, costs, memory=m, placements=('single', 'v'), time_limit=4, method='heuristic',
                             progress=False).makespan for m in (8, 12, 16, 24)]
    assert spans[1] <= spans[0] + 1e-9 and spans[2] <= spans[0] + 1e-9 and spans[3] <= spans[2] + 1e-9, spans


def test_the_span_objective_is_the_zero_bubble_papers_measure():
    "objective='span' minimises the longest rank's span (first start to last end), bounded below by the busiest rank's work."
    c = Costs(1, 1, 1, p2p=0.1)
    by_span = search_schedule(8, 24, c, memory=8, placements=('single',), time_limit=5, objective='span', progress=False)
    by_makespan = search_schedule(8, 24, c, memory=8, placements=('single',), time_limit=5, progress=False)
    assert by_span.span <= by_makespan.span + 1e-9
    assert by_span.lower_bound <= by_span.span and by_span.lower_bound >= 24 * 3 - 1e-9   # the busiest rank's F + B + W
    assert simulate(by_span.schedule, c).longest_span == pytest.approx(by_span.span)
    with pytest.raises(Exception, match="objective must be 'makespan' or 'span'"): search_schedule(4, 8, objective='bubble')


@pytest.mark.timing   # two time-limited local searches compared (see test_more_memory_never_gives_a_worse_answer)
def test_memory_a_split_backward_frees_at_b_never_costs_time():
    "With W keeping half of an activation (Zero Bubble's M_W = M_B / 2) the same cap holds at least as much: never slower, and it fits that rule."
    from chimera_nb.simulate import order_peak_memory
    c = Costs(1, 1, 1, p2p=0.1)
    for m in (3, 5):
        full = search_schedule(8, 32, c, memory=m, placements=('single',), time_limit=3, method='heuristic', progress=False)
        half = search_schedule(8, 32, c, memory=m, placements=('single',), time_limit=3, method='heuristic', w_keeps=0.5, progress=False)
        assert half.makespan <= full.makespan + 1e-9, (m, half, full)
        assert max(order_peak_memory(half.schedule, w_keeps=0.5)) <= m + 1e-9 and half.peak <= m + 1e-9


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.timeout(400)
@pytest.mark.parametrize('D, N, cap', [(32, 256, 64), (32, 256, 131), (64, 256, 128)])
def test_the_time_limit_holds_at_paper_sizes(D, N, cap):
    """D = 32 and 64, N = 256: an answer within the 30 s limit (fit_memory on far-over seeds skipped; a rule always runs).
    The slack: half the limit for the phase in flight, 2 s for the answer (measured alone: 8.1, 9.5, 12.4 s)."""
    r = search_schedule(D, N, Costs(1, 1, 1, p2p=0.1), memory=cap, placements=('single',), time_limit=30, progress=False)
    assert r.seconds <= 30 * 1.5 + 2 and r.gap < 0.02, r


def test_w_keeps_per_rank_spread_over_every_placement():
    "One share per rank (a profile's stages at D) holds for the V's and Chimera's 2 D stages too; a share over 1 is refused."
    r = search_schedule(4, 8, Costs(1, 1, 1), memory=4, w_keeps=[1, 0.5, 0.5, 0.5], time_limit=3, progress=False)
    assert r.peak <= 4 + 1e-9 and r.makespan > 0
    with pytest.raises(Exception, match='w_keeps must be a fraction'): search_schedule(4, 8, w_keeps=[1, 2, 0.5, 0.5])
