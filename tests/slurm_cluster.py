"""A real single-node SLURM cluster on localhost for the tests: munged, slurmctld and slurmd from Debian's `slurm-wlm`
and `munge`, started by hand (no systemd), in a private folder with its own munge key and socket, free ports, and
fake GPUs (character devices made with mknod) so SLURM sets CUDA_VISIBLE_DEVICES. Every daemon started is stopped
by its PID. Needs root (slurmd runs jobs as their users; mknod)."""
import os, shutil, signal, socket, subprocess, time
from pathlib import Path

BINARIES = ('munged', 'slurmctld', 'slurmd', 'sbatch', 'squeue', 'scontrol', 'sinfo')


def why_not() -> str | None:
    "Why a local cluster cannot start here (None: it can)."
    if os.name != 'posix' or os.geteuid() != 0: return "needs root (slurmd starts jobs as their users; the fake GPUs need mknod)"
    missing = [b for b in BINARIES if shutil.which(b) is None and not os.path.exists(f'/usr/sbin/{b}')]
    if missing: return f"SLURM/munge binaries missing: {missing} (apt-get install slurm-wlm munge)"
    return None


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks: s.bind(('127.0.0.1', 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks: s.close()
    return ports


def _exe(name): return shutil.which(name) or f'/usr/sbin/{name}'


CONF = """ClusterName=chimeratest
FirstJobId={first_job}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/sock,cred_expire=10
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
JobAcctGatherType=jobacct_gather/none
GresTypes=gpu
ReturnToService=2
JobRequeue=1
KillWait=60
MinJobAge=3600
SlurmdParameters=config_overrides
InactiveLimit=0
SlurmctldDebug=debug
SlurmdDebug=debug
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=16000 Gres=gpu:fake:{gpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class LocalCluster:
    "Start with `start()`, stop with `stop()` (every daemon by PID); `env` is what SLURM's commands need (SLURM_CONF)."
    def __init__(self, root, cpus=16, gpus=4):
        self.root, self.cpus, self.gpus, self.procs = Path(root), cpus, gpus, []
        self.host = socket.gethostname()
        self.env = dict(os.environ, SLURM_CONF=str(self.root / 'slurm.conf'))

    def _write(self):
        r = self.root
        for d in ('munge', 'state', 'spool', 'log', 'dev'): (r / d).mkdir(parents=True, exist_ok=True)
        os.chmod(r, 0o755); os.chmod(r / 'munge', 0o700)
        (r / 'munge' / 'key').write_bytes(os.urandom(1024)); os.chmod(r / 'munge' / 'key', 0o600)
        for i in range(self.gpus):
            dev = r / 'dev' / f'nvidia{i}'
            if not dev.exists(): os.mknod(dev, 0o666 | 0o020000, os.makedev(195, i))  # a character device, like a GPU's
        ctld, d = _free_ports(2)
        # job ids of their own per test worker: a job's rendezvous port is 20000 + its id, so two clusters on this host
        # (two workers, or a phase that starts while the last one's jobs end) never give two jobs one port
        worker = os.environ.get('PYTEST_XDIST_WORKER', '')[2:]   # '0' for gw0, ...; '' outside xdist
        first = 1000 * (int(worker) + 2) if worker.isdigit() else 1000
        (r / 'slurm.conf').write_text(CONF.format(host=self.host, root=r, ctld_port=ctld, d_port=d, cpus=self.cpus, gpus=self.gpus,
                                                  first_job=first))
        (r / 'gres.conf').write_text(f"AutoDetect=off\nNodeName={self.host} Name=gpu Type=fake File={r}/dev/nvidia[0-{self.gpus - 1}]\n")

    def _spawn(self, *cmd):
        log = open(self.root / 'log' / f'{Path(cmd[0]).name}.out', 'ab')
        p = subprocess.Popen(list(cmd), env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def _wait(self, what, ok, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a SLURM daemon exited while waiting for {what}: see {self.root}/log\n" + self.logs())
            if ok(): return
            time.sleep(0.3)
        raise TimeoutError(f"{what} not ready after {timeout} s: see {self.root}/log\n" + self.logs())

    def _run(self, *cmd):
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=30)

    def logs(self, n=30) -> str:
        out = []
        for f in sorted((self.root / 'log').glob('*')):
            out.append(f"== {f.name}\n" + '\n'.join(f.read_text(errors='replace').splitlines()[-n:]))
        return '\n'.join(out)

    def start(self):
        self._write()
        m = self.root / 'munge'
        self._spawn(_exe('munged'), '-F', '--force', f'--key-file={m}/key', f'--socket={m}/sock', f'--pid-file={m}/pid',
                    f'--log-file={m}/log', f'--seed-file={m}/seed')
        self._wait('munged', lambda: (m / 'sock').exists(), 20)
        self._spawn(_exe('slurmctld'), '-D', '-i')
        self._wait('slurmctld', lambda: self._run('scontrol', 'ping').stdout.count('UP') >= 1, 30)
        self._spawn(_exe('slurmd'), '-D', '-N', self.host)
        self._wait('slurmd', lambda: 'idle' in self._run('sinfo', '-h', '-o', '%t').stdout, 30)
        return self

    def stop(self):
        "Cancel what is left, then stop every daemon this cluster started (by PID): TERM, then KILL after 15 s."
        try: self._run('scancel', '--full', '--quiet', '--user=root')
        except Exception: pass
        for p in reversed(self.procs):
            if p.poll() is None: p.send_signal(signal.SIGTERM)
            try: p.wait(15)
            except subprocess.TimeoutExpired: p.kill(); p.wait(5)
        self.procs = []
