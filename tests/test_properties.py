"""Property-based tests: every generated schedule is valid and complete, and the simulator meets the closed forms."""
import math
from hypothesis import given, settings, strategies as st, HealthCheck
import pytest
from chimera_nb.schedules import make_schedule, validate, Schedule, SCHEDULES, ScheduleError, Action
from chimera_nb.simulate import simulate, Costs, closed_form

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

@st.composite
def schedule_args(draw):
    "A (name, D, N, options) that the generator accepts."
    name = draw(st.sampled_from(sorted(SCHEDULES)))
    opts = {}
    if name == 'chimera':
        D = draw(st.sampled_from([2, 4, 6, 8, 12, 16]))
        opts['pipes'] = draw(st.sampled_from([p for p in (2, 4, 8) if D % p == 0]))
        opts['concat'] = draw(st.sampled_from(['direct', 'doubling', 'halving']))
        N = D * draw(st.integers(2 if opts['concat'] == 'doubling' else 1, 4))
    elif name == 'interleaved-1f1b':
        D = draw(st.integers(1, 8)); opts['chunks'] = draw(st.integers(1, 4)); N = D * draw(st.integers(1, 4))
    elif name == 'dualpipev':
        D = draw(st.integers(1, 8)); N = draw(st.integers(2 * D, 2 * D + 10))
    elif name == 'gems':
        D = draw(st.integers(1, 10)); N = 2 * draw(st.integers(1, 8))
    else:
        D = draw(st.integers(1, 12)); N = draw(st.integers(1, 30))
    return name, D, N, opts

@FAST
@given(schedule_args())
def test_generated_schedules_are_valid_and_complete(args):
    name, D, N, opts = args
    s = make_schedule(name, D, N, **opts)
    kinds = 3 if s.split_backward else 2
    # every (micro-batch, stage, pipe) exactly once per kind
    assert len(s) == kinds * s.num_stages * N
    seen = {a for r in range(s.num_ranks) for a in s.actions(r)}
    assert len(seen) == len(s)
    assert s.num_ranks == D
    # the text and CSV forms round-trip
    assert Schedule.from_text(s.to_text()) == s
    assert Schedule.from_csv(s.to_csv(), microbatches=N) == s
    tl = simulate(s, Costs(1, 1, 1 if s.split_backward else 0))
    assert 0 <= tl.bubble_ratio < 1
    assert len([e for e in tl.events if e.kind in 'FBW']) == len(s)

@FAST
@given(st.sampled_from(['gpipe', '1f1b']), st.integers(1, 16), st.integers(1, 48))
def test_single_pipe_bubble_matches_closed_form(name, D, N):
    tl = simulate(make_schedule(name, D, N))
    assert math.isclose(tl.bubble_ratio, closed_form(name, D, N)['bubble'], abs_tol=1e-12)
    if name == '1f1b': assert max(tl.peak_activations) == min(D, N)
    else: assert max(tl.peak_activations) == N

@FAST
@given(st.sampled_from([2, 4, 6, 8, 10, 12, 16, 20]), st.integers(1, 6))
def test_chimera_bubble_and_memory_match_closed_form(D, k):
    N = D * k
    tl = simulate(make_schedule('chimera', D, N, concat='direct'))
    assert math.isclose(tl.bubble_ratio, closed_form('chimera', D, N)['bubble'], abs_tol=1e-12)
    assert D / 2 + 1 <= max(tl.peak_activations) <= D
    assert tl.weight_copies == [2] * D

@FAST
@given(st.sampled_from([4, 6, 8, 12, 16]), st.integers(2, 6), st.sampled_from(['doubling', 'halving']))
def test_chimera_doubling_and_halving_beat_direct_when_backward_is_twice_forward(D, k, concat):
    N = D * k
    direct = simulate(make_schedule('chimera', D, N), Costs(1, 1, 1)).compute_makespan
    s = make_schedule('chimera', D, N, concat=concat)
    import dataclasses
    tl = simulate(dataclasses.replace(s, recompute=False), Costs(1, 1, 1))
    bound = 3 * N + 1.5 * (D - 2)   # the basic unit's bubbles only (halving's split W can dip below it)
    assert tl.compute_makespan < direct
    if concat == 'doubling':
        # exactly the basic unit's D-2 bubble slots (one backward = one doubled forward each): no intermediate bubbles
        assert bound <= tl.compute_makespan
        if k > 2: assert tl.compute_makespan == 3 * N + 2 * (D - 2)
    assert tl.compute_makespan <= 1.10 * bound  # within 10% of no intermediate bubbles
    assert max(simulate(s).peak_activations) <= D

@FAST
@given(st.sampled_from([4, 8, 16]), st.sampled_from([4, 8]), st.integers(1, 3))
def test_chimera_many_pipes(D, pipes, k):
    if D % pipes: return
    s = make_schedule('chimera', D, D * k, pipes=pipes)
    assert all(len(s.replicas(st_)) == pipes for st_ in range(D))
    tl = simulate(s)
    two = simulate(make_schedule('chimera', D, D * k))
    assert tl.makespan <= two.makespan

@pytest.mark.parametrize('bad, msg', [
    (lambda: make_schedule('chimera', 5, 10), 'even number of stages'),
    (lambda: make_schedule('chimera', 4, 6), 'positive multiple of D=4'),
    (lambda: make_schedule('chimera', 6, 12, pipes=4), 'does not divide 6'),
    (lambda: make_schedule('chimera', 4, 4, concat='tripling'), 'choose one of'),
    (lambda: make_schedule('chimera', 4, 4, concat='doubling'), 'N >= 8'),
    (lambda: make_schedule('gems', 4, 3), 'N must be even'),
    (lambda: make_schedule('dualpipev', 4, 6), 'at least 2D = 8'),
    (lambda: make_schedule('interleaved-1f1b', 4, 6), 'multiple of the 4 ranks'),
    (lambda: make_schedule('nope', 4, 4), 'choose one of'),
    (lambda: make_schedule('1f1b', 0, 4), 'positive integer'),
    (lambda: make_schedule('1f1b', 4, 4, pipes=2), 'takes options'),
])
def test_bad_input_names_problem_and_fix(bad, msg):
    with pytest.raises(ValueError, match=msg): bad()

def test_hand_written_schedule_errors_name_rank_action_and_dependency():
    s = Schedule.from_text("rank 0: F0.d0 F0.d1 B0.d1 B0.d0\nrank 1: F1.d0 B1.d0 B1.d1 F1.d1")
    with pytest.raises(ScheduleError, match=r"rank 1, step 2: B1.d1 waits for F1.d1 which comes later on the same rank"):
        validate(s)
    s = Schedule.from_text("rank 0: F0.d0 B0.d0\nrank 1: F1.d0")
    with pytest.raises(ScheduleError, match=r"rank 1: action B1.d0 is missing"):
        validate(s)
    s = Schedule.from_text("rank 0: F0.d0 B0.d0 W0.d0\nrank 1: F1.d0 B1.d0", )
    with pytest.raises(ScheduleError, match="W1.d0 is missing"):
        validate(s)
