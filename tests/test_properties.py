"""Property-based tests of the schedule library: every generated schedule is valid, complete and round-trips;
Chimera is the paper's order; the simulator meets every closed form; readers survive fuzzing."""
import dataclasses, math, random, string
from hypothesis import given, settings, strategies as st, HealthCheck, assume
from tiers import examples   # the Hypothesis profile: fewer examples in make test, all in make test-all
import pytest
from chimera_nb.schedules import make_schedule, SCHEDULES, chimera_placement
from chimera_nb.ir import validate, Schedule, ScheduleError, Action, list_schedule, parse_action, replay
from chimera_nb.simulate import simulate, Costs, closed_form, lower_bound, order_peak_memory
from chimera_nb.program import lower, check_program

FAST = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def schedule_args(draw):
    "A (name, D, N, options) that the generator accepts."
    name = draw(st.sampled_from(sorted(SCHEDULES)))
    opts = {}
    if name == 'chimera':
        D = draw(st.sampled_from([2, 4, 6, 8, 12, 16]))
        opts['concat'] = draw(st.sampled_from(['direct', 'doubling', 'halving', 'zero-bubble']))
        opts['pipes'] = draw(st.sampled_from([p for p in (2, 4, 8) if D % p == 0])) if opts['concat'] in ('direct', 'zero-bubble') else 2
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
def test_generated_schedules_are_valid_complete_and_round_trip(args):
    name, D, N, opts = args
    s = make_schedule(name, D, N, **opts)
    kinds = 3 if s.split_backward else 2
    assert len(s) == kinds * s.num_stages * s.microbatches  # every (micro-batch, stage, pipe) once per kind
    assert len({a for r in range(s.num_ranks) for a in s.actions(r)}) == len(s)
    assert s.num_ranks == D
    # the text and CSV forms round-trip, flags (recompute, split, micro-batch size) included
    assert Schedule.from_text(s.to_text()) == s
    assert Schedule.from_csv(s.to_csv()) == s
    check_program(lower(s))
    tl = simulate(s, Costs(1, 1, 1 if s.split_backward else 0))
    assert 0 <= tl.bubble_ratio < 1
    assert len([e for e in tl.events if e.kind in 'FBW']) == len(s)


@FAST
@given(schedule_args(), st.booleans(), st.randoms(use_true_random=False))
def test_every_bound_holds_and_the_tighter_ones_are_tighter(args, recompute, rnd):
    """The search prunes by lower_bound's counts, then the micro-batches in flight, then the order replayed: each must stay
    under the simulated makespan on any costs, with and without replicas, or the search would drop a winner."""
    name, D, N, opts = args
    s = dataclasses.replace(make_schedule(name, D, N, **opts), recompute=recompute)
    S = s.num_stages
    c = Costs([rnd.uniform(0.1, 3) for _ in range(S)], [rnd.uniform(0.1, 5) for _ in range(S)], [rnd.uniform(0, 2) for _ in range(S)],
              p2p=rnd.choice([0.0, rnd.uniform(0, 0.5)]), allreduce=rnd.uniform(0, 2))
    counts, flight = lower_bound(s, c), lower_bound(s, c, in_flight=True)
    replayed = max(t for *_, t in replay(s, c.action_costs(s), why=False)[0])
    assert counts <= flight + 1e-9
    assert max(flight, replayed) <= simulate(s, c).makespan + 1e-9
    assert lower_bound(s, c, dp=2, in_flight=True) <= simulate(lower(s, 'eager', 2), c).makespan + 1e-9



@FAST
@given(schedule_args(), st.booleans(), st.booleans(), st.randoms(use_true_random=False))
def test_memory_read_from_the_order_equals_the_simulated_timelines(args, recompute, forwards, rnd):
    """A search reads each candidate's peak memory from its order alone (one action at a time per rank); any timing of the
    order, with messages, all-reduces and uneven stages, must give the same per-rank peaks."""
    name, D, N, opts = args
    s = dataclasses.replace(make_schedule(name, D, N, **opts), recompute=recompute)
    s = s.forwards() if forwards else s
    S = s.num_stages
    c = Costs([rnd.uniform(0.1, 3) for _ in range(S)], [rnd.uniform(0.1, 5) for _ in range(S)], [rnd.uniform(0.05, 2) for _ in range(S)],
              p2p=rnd.choice([0.0, rnd.uniform(0, 0.5)]), allreduce=rnd.uniform(0, 2))
    ma, mi = [rnd.uniform(0.5, 4) for _ in range(S)], [rnd.uniform(0, 1) for _ in range(S)]
    assert order_peak_memory(s, ma, mi) == pytest.approx(simulate(s, c).peak_memory(ma, mi), abs=1e-9)

# ---------------------------------------------------------------- Chimera is the paper's order
def phases_reference(D, N, doubling=False):
    """The original Chimera code's per-worker lists, written from its phases (ChimeraBk branch of the authors'
    repository, chimera_bert/bert/main_with_runtime_direct.py and main_with_runtime_forward_doubling.py)."""
    h, orders = D // 2, []
    for r in range(D):
        a = h - r if r < h else r - h + 1
        b = h - a
        mine, other = (0, 1) if r < h else (1, 0)
        stage, nf, nb, o = {0: r, 1: D - 1 - r}, [0, 0], [0, 0], []
        def F(p): o.append(Action('F', stage[p], nf[p], p)); nf[p] += 1
        def B(p): o.append(Action('B', stage[p], nb[p], p)); nb[p] += 1
        if not doubling:
            for u in range(N // D):
                for _ in range(a):
                    if u: B(mine)
                    F(mine)
                for _ in range(b): F(other); F(mine)
                for _ in range(a): F(other); B(other)
                for _ in range(b): B(mine); B(other)
        else:
            for u in range(N // (2 * D)):
                for _ in range(a):
                    if u: B(mine)
                    F(mine); F(mine)
                for _ in range(b): F(other); F(other); F(mine); F(mine)
                for _ in range(a): F(other); F(other); B(other)
                for _ in range(b + h): B(mine); B(other)
        for _ in range(a): B(mine)
        orders.append(o)
    return orders


PAPER_D4 = ['F0.d0 F0.d1 F3.u0 B3.u0 F3.u1 B3.u1 B0.d0 B0.d1',   # the paper's Fig. 3 (DESIGN.md's basic unit)
            'F1.d0 F2.u0 F1.d1 F2.u1 B2.u0 B1.d0 B2.u1 B1.d1',
            'F1.u0 F2.d0 F1.u1 F2.d1 B2.d0 B1.u0 B2.d1 B1.u1',
            'F0.u0 F0.u1 F3.d0 B3.d0 F3.d1 B3.d1 B0.u0 B0.u1']


def test_chimera_basic_unit_is_the_papers_figure():
    s = make_schedule('chimera', 4, 4)
    assert [' '.join(a.token() for a in o) for o in s.orders] == PAPER_D4


@pytest.mark.parametrize('D', [4, 6, 8, 16])
@pytest.mark.parametrize('k', [1, 2, 4])
def test_chimera_matches_the_original_codes_lists(D, k):
    N = D * k
    assert make_schedule('chimera', D, N).orders == phases_reference(D, N)
    if k % 2 == 0:
        assert make_schedule('chimera', D, N, concat='doubling').orders == phases_reference(D, N, doubling=True)
        # backward halving: forward doubling's order over 2N half micro-batches
        assert make_schedule('chimera', D, N, concat='halving').orders == phases_reference(D, 2 * N, doubling=True)


def greedy_chimera(D, N):
    "The greedy list-scheduled order chimera_nb generated before it followed the paper (units in order, at most D live)."
    place, per = chimera_placement(D), D // 2
    acts = [Action(k, s, m, p) for p in range(2) for m in range(N // 2) for s in range(D) for k in 'FB']
    unit = lambda a: a.microbatch // per
    prio = lambda a: (unit(a), 'BF'.index(a.kind), a.microbatch, a.pipe)
    allow = lambda r, a, st_: a.kind != 'F' or (st_['f'] >= unit(a) * D and st_['f'] - st_['b'] < D)
    return Schedule('chimera', D, D, 2, N, place, list_schedule(place, D, D, acts, prio, allow))


@FAST
@given(st.sampled_from([4, 6, 8, 12, 16]), st.integers(1, 4), st.sampled_from([1, 2, 3]), st.randoms(use_true_random=False))
def test_chimera_paper_order_is_never_measurably_slower_than_the_greedy_one(D, k, ratio, rnd):
    """With uneven stages (random per-stage forward times) and B = ratio x F, the paper's order is at most 3% slower
    than the greedy one (over 400 random cases it was slower in 2, by 2.8% at most, and faster in 126, by up to 5.6%)."""
    N = D * k
    f = [rnd.uniform(0.5, 2) for _ in range(D)]
    c = Costs(f, [x * ratio for x in f])
    paper, greedy = simulate(make_schedule('chimera', D, N), c).makespan, simulate(greedy_chimera(D, N), c).makespan
    assert paper <= 1.03 * greedy, (paper, greedy)


# ---------------------------------------------------------------- closed forms
@FAST
@given(st.sampled_from(['gpipe', '1f1b']), st.integers(1, 16), st.integers(1, 48))
def test_single_pipe_bubble_matches_closed_form(name, D, N):
    tl = simulate(make_schedule(name, D, N))
    assert math.isclose(tl.bubble_ratio, closed_form(name, D, N)['bubble'], abs_tol=1e-12)
    if name == '1f1b': assert max(tl.peak_activations) == min(D, N)
    else: assert max(tl.peak_activations) == N


@FAST
@given(st.sampled_from([2, 4, 6, 8, 10, 12, 16, 20]), st.integers(1, 6), st.sampled_from([2, 4, 8]))
def test_chimera_bubble_and_memory_match_tables_2_and_3(D, k, pipes):
    assume(D % pipes == 0)
    N = D * k
    tl = simulate(make_schedule('chimera', D, N, pipes=pipes))
    cf = closed_form('chimera', D, N, pipes=pipes)
    assert math.isclose(tl.bubble_ratio, cf['bubble'], abs_tol=1e-12)
    assert cf['act_min'] <= max(tl.peak_activations) <= cf['act_max']
    assert tl.weight_copies == [pipes] * D


@FAST
@given(st.sampled_from([2, 4, 6, 8, 12, 16]), st.integers(2, 6), st.sampled_from(['doubling', 'halving']))
def test_doubling_and_halving_reach_their_bound_at_b_equal_2f(D, k, concat):
    "Forward doubling: 3N + 1.5(D-2) forward-times at B = 2F, recompute not counted, for every N = kD >= 2D."
    N = D * k
    c = Costs(1, 1, 1, recompute=0)
    tl = simulate(make_schedule('chimera', D, N, concat=concat), c)
    bound = 3 * N + (1.5 if concat == 'doubling' else 0.75) * (D - 2)
    assert math.isclose(tl.makespan, bound, abs_tol=1e-9), (tl.makespan, bound)
    direct = simulate(make_schedule('chimera', D, N), c).makespan
    assert tl.makespan <= direct


@FAST
@given(st.integers(1, 12), st.integers(0, 30), st.floats(0.1, 3), st.floats(0.1, 3), st.floats(0, 3))
def test_zb_h1_reaches_its_closed_form(D, extra, F, B, W):
    "N(F+B+W) + (D-1)(F+B-W) for every N >= D whenever W <= min(F, B) (the Zero Bubble paper's regime); peak <= D."
    assume(W <= min(F, B))
    N = D + extra
    tl = simulate(make_schedule('zb-h1', D, N), Costs(F, B, W))
    assert tl.makespan <= N * (F + B + W) + (D - 1) * (F + B - W) + 1e-9
    assert max(tl.peak_activations) <= D


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize('bad, msg', [
    (lambda: make_schedule('chimera', 5, 10), 'even number of stages'),
    (lambda: make_schedule('chimera', 4, 6), 'positive multiple of D=4'),
    (lambda: make_schedule('chimera', 6, 12, pipes=4), 'does not divide 6'),
    (lambda: make_schedule('chimera', 4, 4, concat='tripling'), 'choose one of'),
    (lambda: make_schedule('chimera', 4, 4, concat='doubling'), 'N >= 8'),
    (lambda: make_schedule('chimera', 8, 8, pipes=4, concat='doubling'), 'defined for 2 pipes'),
    (lambda: make_schedule('gems', 4, 3), 'N must be even'),
    (lambda: make_schedule('dualpipev', 4, 6), 'at least 2D = 8'),
    (lambda: make_schedule('interleaved-1f1b', 4, 6), 'multiple of the 4 ranks'),
    (lambda: make_schedule('nope', 4, 4), 'choose one of'),
    (lambda: make_schedule('1f1b', 0, 4), r'in \[1, 4096\]'),
    (lambda: make_schedule('1f1b', 4, 4, pipes=2), 'takes options'),
    (lambda: make_schedule('gpipe', 10**30, 4), r'in \[1, 4096\]'),
    (lambda: make_schedule('interleaved-1f1b', 4, 4, chunks=10**6), r'in \[1, 64\]'),
])
def test_bad_input_names_problem_and_fix(bad, msg):
    with pytest.raises(ValueError, match=msg): bad()


@pytest.mark.parametrize('bad, msg', [
    (lambda: make_schedule('chimera', 4, 4, pipes='2'), 'must be an integer'),
    (lambda: make_schedule('interleaved-1f1b', 4, 4, chunks=True), 'must be an integer'),
    (lambda: make_schedule('1f1b', 4.0, 4), 'must be an integer'),
    (lambda: Schedule.from_text(None), 'as a str'),
    (lambda: Schedule.from_csv(b'0,F0.d0'), 'decode it first'),
])
def test_wrong_types_are_type_errors(bad, msg):
    with pytest.raises(TypeError, match=msg): bad()


def test_hand_written_schedule_errors_name_rank_action_and_dependency():
    s = Schedule.from_text("rank 0: F0.d0 F0.d1 B0.d1 B0.d0\nrank 1: F1.d0 B1.d0 B1.d1 F1.d1")
    with pytest.raises(ScheduleError, match=r"rank 1, step 2: B1.d1 waits for F1.d1 which comes later on the same rank"):
        validate(s)
    with pytest.raises(ScheduleError, match=r"rank 1: action B1.d0 is missing"):
        validate(Schedule.from_text("rank 0: F0.d0 B0.d0\nrank 1: F1.d0"))
    with pytest.raises(ScheduleError, match="W1.d0 is missing"):
        validate(Schedule.from_text("rank 0: F0.d0 B0.d0 W0.d0\nrank 1: F1.d0 B1.d0"))


@pytest.mark.parametrize('text, msg', [
    ("rank 0: F0.d0 B0.d0\nrank 1: F2.d0 B2.d0", 'stage 1 is missing'),                  # a stage gap
    ("rank 0: F0.d0 B0.d0 F0.u0 B0.u0\nrank 1: F1.d0 B1.d0", 'pipe u lacks stages'),     # a pipe with fewer stages
    ("rank 0: F0.d0 B0.d0\nrank 0: F1.d0 B1.d0", 'rank 0 appears twice'),                 # a duplicate rank line
    ("rank 0: F0.d0 B0.d0 F0.f0 B0.f0", 'without gaps'),                                 # pipe letters with gaps
    ("# schedule x ranks=2 stages=1\nrank 0: F0.d0 B0.d0", 'header says ranks=2'),       # the header is checked
    ("# schedule x stages=5\nrank 0: F0.d0 B0.d0", 'header says stages=5'),
    ("# schedule x colour=red\nrank 0: F0.d0 B0.d0", 'keys are'),
    ("rank 0: F0.d0 B0.d0\nrank 1: F1.d0 B1.d0\nrank 3: F2.d0 B2.d0", 'without gaps'),
    ("rank 0: F" + '9' * 40 + ".d0", 'expected KIND'),                                   # a huge stage number
    ("rank 0: F٣.d0", 'expected KIND'),                                                  # non-ASCII digits
])
def test_malformed_text_is_refused_with_its_reason(text, msg):
    with pytest.raises(ValueError, match=msg): Schedule.from_text(text)


@pytest.mark.parametrize('text, msg', [
    ("0,F0.d0,B0.d0\n1\n", 'rank 1 has no actions'),                 # a blank row is not an idle rank
    ("1,F0.d0,B0.d0\n0,F1.d0,B1.d0\n0,F1.d0", 'appears twice'),      # the rank column is read, not ignored
    ("0,F0.d0,B0.d0\n2,F1.d0,B1.d0\n", 'without gaps'),
    ("x,F0.d0\n", 'first column is the rank'),
    ("0," + "F0.d0" * 100000 + "\n", 'field larger than'),             # a field over the csv module's limit
    ("0,F0.d0,B0.d0\r1,F1.d0,B1.d0\r", None),                        # CR line endings read fine
])
def test_csv_reader(text, msg):
    if msg is None:
        assert Schedule.from_csv(text).num_ranks == 2
        return
    with pytest.raises(ValueError, match=msg): Schedule.from_csv(text)


def test_csv_keeps_recompute_and_micro_batch_size():
    for s in (make_schedule('chimera', 4, 8, concat='doubling'), make_schedule('chimera', 4, 8, concat='halving')):
        t = Schedule.from_csv(s.to_csv())
        assert (t.recompute, t.microbatch_scale) == (s.recompute, s.microbatch_scale)
        assert simulate(t, Costs(1, 1, 1)).makespan == simulate(s, Costs(1, 1, 1)).makespan


# ---------------------------------------------------------------- fuzzing the readers
TOKENS = st.builds(lambda k, s, p, m: f"{k}{s}.{p}{m}", st.sampled_from('FBWX'), st.integers(0, 12),
                   st.sampled_from('dufz'), st.integers(0, 12))
LINES = st.one_of(
    st.builds(lambda r, ts: f"rank {r}: " + ' '.join(ts), st.integers(0, 5), st.lists(TOKENS, max_size=12)),
    st.builds(lambda p, rs: f"placement {p}: " + ' '.join(map(str, rs)), st.sampled_from('duex'), st.lists(st.integers(0, 6), max_size=6)),
    st.builds(lambda kv: "# schedule fuzz " + ' '.join(kv), st.lists(st.sampled_from(
        ['ranks=2', 'stages=2', 'pipes=1', 'microbatches=2', 'recompute=1', 'split_backward=1', 'ranks=x', 'microbatch_scale=0.5', 'q=1']), max_size=4)),
    st.text(max_size=40))
ODD_TEXT = st.one_of(st.text(max_size=300), st.text(alphabet=string.printable + 'ـ٣\u2028\x00', max_size=300),
                     st.lists(LINES, max_size=8).map('\n'.join))


def _mutate(text, rnd):
    chars = list(text)
    for _ in range(rnd.randint(1, 6)):
        op = rnd.randrange(4)
        i = rnd.randrange(len(chars) + 1)
        if op == 0 and chars: chars.pop(min(i, len(chars) - 1))
        elif op == 1: chars.insert(i, rnd.choice('FBWdu0123456789 :.,\n#=\r'))
        elif op == 2 and chars: chars[min(i, len(chars) - 1)] = rnd.choice('FBWdu0123456789')
        else: chars[i:i] = list(rnd.choice(['rank 9: F0.d0', '\n\n', '99999', 'recompute=1', ',,']))
    return ''.join(chars)


def _read_everything(text):
    "Each reader either returns a schedule that validates (or raises ScheduleError), or raises ValueError/TypeError."
    for reader in (Schedule.from_text, Schedule.from_csv):
        try: s = reader(text)
        except (ValueError, TypeError): continue
        try:
            validate(s)
            simulate(s)
        except ScheduleError: pass


@settings(max_examples=examples(300), deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(ODD_TEXT)
def test_fuzz_readers_on_random_and_grammar_text(text):
    _read_everything(text)


@settings(max_examples=examples(300), deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(schedule_args(), st.randoms(use_true_random=False), st.booleans())
def test_fuzz_readers_on_mutated_valid_schedules(args, rnd, as_csv):
    name, D, N, opts = args
    s = make_schedule(name, D, N, **opts)
    text = s.to_csv() if as_csv else s.to_text()
    _read_everything(_mutate(text, rnd))
