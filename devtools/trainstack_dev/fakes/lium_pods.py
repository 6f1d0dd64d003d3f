"""A fake Lium pod: a loopback OpenSSH server in its own PID and mount namespaces.

What a pod of the real service gives, on this machine: `ssh root@127.0.0.1 -p PORT` (key auth,
SFTP), its own `/workspace` and `/root` (directories of the fake), the attached volume at `/mnt` (a
directory that outlives the pod and is mounted by the next pod that attaches it), and an
"image" that is this machine with trainstack's virtualenv as `python3` in `/usr/local/bin`.
The submit host's `/tmp` is hidden (a fresh tmpfs), so a run that reads a submit-host path by
mistake fails here as it would on a real pod.

Every process started through the pod lives in its PID namespace: killing the namespace's first
process (sshd, PID 1 inside) makes the kernel kill all of them, whatever sessions or process
groups they made (sshd and `setsid` make new ones). Needs root (mount/PID namespaces) and
`/usr/sbin/sshd` (Debian's openssh-server).
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from trainstack.fencing.lease import pid_alive

SSHD = "/usr/sbin/sshd"
POD_WORKSPACE = "/workspace"
POD_VOLUME = "/mnt"


def missing_requirements() -> str | None:
    """Why pods cannot start on this machine, or None."""
    if os.geteuid() != 0:
        return "fake Lium pods need root (mount and PID namespaces)"
    if not Path(SSHD).exists():
        return f"{SSHD} not found: apt-get install openssh-server"
    for tool in ("unshare", "ssh-keygen", "mount", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _with_parent_death_signal(argv: list[str]) -> list[str]:
    """`setpriv --pdeathsig KILL`: the pod dies with the fake's thread that started it, set before
    exec without a preexec_fn (which can deadlock a threaded parent between fork and exec)."""
    return ["setpriv", "--pdeathsig", "KILL", "--", *argv] if shutil.which("setpriv") else argv


def has_trainstack(docker_image: str) -> bool:
    """Does this image of the fake contain trainstack? An image built from docker/Dockerfile is named
    `.../trainstack...`; Lium's stock images (pytorch/pytorch, the default template) are not."""
    return "trainstack" in docker_image.rsplit("/", 1)[-1]


def image_bin(root: Path, python: str, trainstack: bool = True) -> Path:
    """`/usr/local/bin` of the fake image: the host's entries plus python/python3/trainstack from
    trainstack's virtualenv (wrapper scripts, so the venv's prefix is kept). `trainstack=False`: a stock
    image, whose python3 is the bare interpreter (no trainstack) and which has no `trainstack` command."""
    out = root / ("image-bin" if trainstack else "image-bin-stock")
    if out.is_dir():
        return out
    if not trainstack:
        python = str(Path(sys.base_prefix) / "bin" / Path(sys.executable).name)
    import threading

    tmp = root / f".image-bin.{os.getpid()}.{threading.get_ident()}"
    tmp.mkdir(parents=True, exist_ok=True)
    host = Path("/usr/local/bin")
    for entry in host.iterdir() if host.is_dir() else []:
        (tmp / entry.name).symlink_to(entry)
    venv_bin = Path(python).parent
    for name, target in (("python", python), ("python3", python), ("trainstack", str(venv_bin / "trainstack"))):
        p = tmp / name
        if p.is_symlink() or p.exists():
            p.unlink()
        if name == "trainstack" and not trainstack:
            continue
        p.write_text(f"#!/bin/sh\nexec {shlex.quote(target)} \"$@\"\n")
        p.chmod(0o755)
    try:
        tmp.rename(out)
    except OSError:  # another fake made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


@dataclass
class PodProcess:
    """One running pod: its directories, port and the namespace's processes."""

    pod_id: str
    root: Path  # <fake root>/pods/<pod id>
    port: int
    volume_dir: Path | None
    proc: subprocess.Popen | None = None
    frozen: bool = False
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.root / "sshd.log"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    def start(self, authorized_keys: list[str], image: Path) -> None:
        conf = self.root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        self.workspace.mkdir(parents=True, exist_ok=True)
        key = conf / "host_ed25519"
        if not key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        (conf / "authorized_keys").write_text("".join(k.strip() + "\n" for k in authorized_keys))
        (conf / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey /run/pod/host_ed25519\n"
            "AuthorizedKeysFile /run/pod/authorized_keys\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "PrintMotd no\nPidFile none\nSubsystem sftp internal-sftp\nMaxStartups 100\nMaxSessions 100\n"
            "ClientAliveInterval 0\nLogLevel ERROR\n")
        Path(POD_WORKSPACE).mkdir(exist_ok=True)  # mount points on the host (empty; the binds are private)
        home = self.root / "root"  # the pod's own /root (not the host's dotfiles)
        home.mkdir(mode=0o700, exist_ok=True)
        binds = [f"mount --bind {shlex.quote(str(self.workspace))} {POD_WORKSPACE}"]
        for keep in _image_dirs_under("/root"):  # the interpreter of the image, if it lives under /root
            inner = home / Path(keep).relative_to("/root")
            inner.mkdir(parents=True, exist_ok=True)
            binds.append(f"mount --bind {shlex.quote(keep)} {shlex.quote(str(inner))}")
        slime = _image_slime()
        if slime is not None:  # the image's slime checkout at /root/slime, as docker/Dockerfile puts it there
            (home / "slime").mkdir(exist_ok=True)
            binds.append(f"mount --bind {shlex.quote(slime)} {shlex.quote(str(home / 'slime'))}")
        binds.append(f"mount --rbind {shlex.quote(str(home))} /root")
        if self.volume_dir is not None:
            binds.append(f"mount --bind {shlex.quote(str(self.volume_dir))} {POD_VOLUME}")
        keep_tmp = _image_dirs_under("/tmp")
        script = " && ".join([
            *binds,
            f"mount --bind {shlex.quote(str(image))} /usr/local/bin",
            "mount -t tmpfs -o mode=0755 tmpfs /run", "mkdir -p /run/sshd /run/pod",
            f"mount --bind {shlex.quote(str(conf))} /run/pod",
            # the pod's own empty /tmp, keeping the image's dirs that live under the host's /tmp
            *[f"mkdir -p /run/keep/{i} && mount --bind {shlex.quote(d)} /run/keep/{i}" for i, d in enumerate(keep_tmp)],
            "mount -t tmpfs -o mode=1777 tmpfs /tmp",
            *[f"mkdir -p {shlex.quote(d)} && mount --move /run/keep/{i} {shlex.quote(d)}" for i, d in enumerate(keep_tmp)],
            f"exec {SSHD} -D -e -f /run/pod/sshd_config",
        ])
        argv = _with_parent_death_signal(["unshare", "--pid", "--fork", "--mount", "--propagation", "private",
                                          "--mount-proc", "--kill-child", "/bin/sh", "-c", script])
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, close_fds=True)

    def answers(self) -> bool:
        if not self.alive():
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.settimeout(0.5)
                return s.recv(4).startswith(b"SSH")
        except OSError:
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def init_pid(self) -> int | None:
        """Host PID of the namespace's PID 1 (sshd), the child of `unshare`."""
        if self.proc is None:
            return None
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def pids(self) -> list[int]:
        """Host PIDs of every process in the pod (same PID namespace as its PID 1)."""
        init = self.init_pid()
        if init is None:
            return []
        try:
            ns = os.readlink(f"/proc/{init}/ns/pid_for_children")
        except OSError:
            try:
                ns = os.readlink(f"/proc/{init}/ns/pid")
            except OSError:
                return []
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/ns/pid") == ns:
                        out.append(int(entry))
                except OSError:
                    continue
        return out

    def signal_all(self, signum: int) -> int:
        n = 0
        for pid in self.pids():
            try:
                os.kill(pid, signum)
                n += 1
            except ProcessLookupError:
                pass
        return n

    def freeze(self) -> int:
        self.frozen = True
        return self.signal_all(signal.SIGSTOP)

    def thaw(self) -> int:
        self.frozen = False
        return self.signal_all(signal.SIGCONT)

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL the namespace: sshd and every process started through it, then wait for them."""
        if self.proc is None:
            return
        pids = self.pids()
        init = self.init_pid()
        if init is not None:
            try:
                os.kill(init, signal.SIGKILL)  # the kernel kills the rest of the PID namespace
            except ProcessLookupError:
                pass
        try:
            os.kill(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"fake lium: pod {self.pod_id}: unshare did not exit", file=sys.stderr)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
            time.sleep(0.05)


def _image_slime() -> str | None:
    """The slime checkout the image carries (docker/Dockerfile: /root/slime, its $TRAINSTACK_SLIME_ROOT and
    the pods' `cluster.lium.pod.slime_root`): the trainstack checkout's submodule, when it is filled."""
    import trainstack

    sub = Path(trainstack.__file__).resolve().parents[1] / "slime"
    return str(sub) if (sub / "slime" / "__init__.py").is_file() else None


def _image_dirs_under(prefix: str) -> list[str]:
    """Directories of this Python installation below `prefix` that the image must keep when the pod
    gets its own `prefix`: the interpreter (e.g. pyenv's in /root), the venv, and trainstack's source
    (an editable install: a checkout cloned into /tmp or /root)."""
    import trainstack

    found = {os.path.realpath(d) for d in (sys.base_prefix, sys.prefix, Path(trainstack.__file__).parents[1])}
    under = sorted(d for d in found if d == prefix or d.startswith(prefix.rstrip("/") + "/"))
    return [d for d in under if not any(d.startswith(o + "/") for o in under if o != d)]  # outermost only
