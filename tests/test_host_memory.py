"""Host memory at launch: a rank the kernel's OOM killer ends is reported as such, with its last resident memory.

A real OOM kill is not produced here: on a shared machine it would put other programs at risk, and a cgroup of its own
needs root. So each test starts a real rank that holds memory (the launcher samples it) and is ended by a real SIGKILL,
and the kernel's OOM-kill count is a function the test passes in (`launch.oom_kills`, read before the ranks start and when
a rank dies by SIGKILL): moved, the message must name the OOM killer; unmoved, the signal as before."""
import os, re, signal, time
import pytest
import chimera_nb.launch as launch
from chimera_nb.failures import PipelineFailure


def _hog(rank, world):
    "Hold 200 MB resident, long enough for the launcher to sample it, then die as the OOM killer ends a process."
    x = b'\x01' * (200 << 20)   # written, so resident (a zeroed allocation would not be)
    time.sleep(3)   # the launcher samples every 0.5 s: a loaded machine (CI's, the suite's two workers) may starve it for a second
    os.kill(os.getpid(), signal.SIGKILL)
    return len(x)


@pytest.mark.parametrize('oom', [True, False], ids=['oom-killed', 'killed'])
def test_a_rank_killed_by_the_oom_killer_is_named_with_its_memory(oom, monkeypatch):
    counts = iter(range(100))   # each read of the count: one more kill (the OOM killer ran), or always the same
    monkeypatch.setattr(launch, 'oom_kills', (lambda: {'/proc/vmstat': next(counts)}) if oom else (lambda: {'/proc/vmstat': 7}))
    with pytest.raises(PipelineFailure) as e: launch.launch_local(_hog, 1, timeout=60)
    msg = str(e.value)
    what = "was killed by the kernel's OOM killer (out of host memory; " if oom else 'was killed by signal SIGKILL without reporting an error ('
    m = re.search(re.escape(f"rank 0 {what}its last resident memory ") + r'([0-9.]+) GB', msg)
    assert m and float(m.group(1)) >= 0.2, msg   # the 200 MB it held (and what it shares with the launcher it was forked from)
    assert ('start fewer ranks on this machine' in msg) == oom and ('OOM' in msg) == oom, msg
