"""Warm by default: the CLI starts the user's `memcli serve --all-databases` when no daemon
answers.

Standard library only, on the client's route (memcli/service/daemon/client.py), as Mercurial's chg
starts its command server. When a command finds no daemon for its database (neither a daemon
started by hand for it nor the user's daemon answers), `maybe_start` starts the user's daemon
in the background and the command itself runs in-process at once: waiting for the daemon would
cost more than the in-process run, since the daemon imports every command and loads every model
before it answers. The next commands, for this database or any other, are forwarded to it.

One daemon per user and configuration (`paths.user_key`: memcli's version and folder, the
interpreter, the config file, memcli's model and key settings in the environment), as chg keeps
one server per configuration and Gradle one daemon per user and version: five projects with a
memory each share one daemon and one copy of the models. The daemon has no database of its own;
each command opens the database it names, as in-process.

The daemon is detached: a session of its own (double fork and `setsid`: no terminal, no
process group a Ctrl-C reaches, not a child of the command), working folder `/`, stdin
`/dev/null`, stdout and stderr appended to `u-<key>.log` beside its socket (`paths.Endpoint.log`,
in the runtime folder, 0700). Its environment is its own (`daemon_env`): the config file's path
and an allowlist of what Python and memcli's settings need, never a database, the scope or the
tokens of the command that started it (docs/guides/daemon.md, "What the daemon is given"). It
holds the daemon lock from the start, waits for the command that started it to end, then runs
`memcli serve --all-databases --auto-started --idle-exit MINUTES`, which exits after
`DEFAULT_IDLE_EXIT` minutes without a request (`daemon_idle_exit:` in the config file,
`MEMCLI_DAEMON_IDLE_EXIT`).

Nothing is started when:
- the mode is not "auto": `MEMCLI_NO_DAEMON=1` or config `daemon: off` (no daemon at all,
  read by the client too), `MEMCLI_AUTOSTART=0` or config `daemon: manual` (a daemon started
  by hand is used, none is started);
- the command is never forwarded (`serve`, `mcp`, completion), asks for `--help` or
  `--version`, is `serve status`, or works on a scratch database (`demo`);
- the socket's folder fails the trust rule (`paths.ensure_private_dir`: another user's, or
  open to others) or a socket there was refused as untrusted (the client decides that);
- a process holds the daemon lock: a daemon is starting, serving or stopping. The lock is
  taken before anything starts and handed on, never released, from the daemon-to-be to
  `memcli serve` (`--lock-fd`), so of commands racing, one starts a daemon; a second `memcli
  serve` on the same socket finds the lock taken and exits 75 (a line in the log).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from memcli.service.daemon import paths

DEFAULT_IDLE_EXIT = 15.0  # minutes: Gradle's daemon waits 3 h, chg's server 1 h; memory is
# cheap to get back (~1 s of warm-up), so an idle daemon gives its ~300 MB back sooner.
NEVER_STARTED = frozenset({"serve", "mcp", "demo", "completion"})
HELP_WORDS = frozenset({"--help", "-h", "--version", "--install-completion",
                        "--show-completion"})
LOCK_FD = 3  # the daemon lock's fd number in the daemon-to-be and in `memcli serve` after it
CALLER_WAIT = 30.0  # seconds the daemon-to-be waits for the command that started it
LOG_LIMIT = 1 << 20  # bytes: a longer log is emptied when a daemon starts
MODES = ("auto", "manual", "off")
_FALSE = ("0", "off", "false", "no")


def config_values(env: Mapping[str, str]) -> dict[str, str]:
    """The top-level `daemon:` and `daemon_idle_exit:` of the config file, read as text
    (`paths.config_values`), lower case; {} when there is no file. memcli.config validates
    the same keys when the app loads its settings."""
    return {key: value.lower() for key, value in paths.config_values(env).items()
            if key in ("daemon", "daemon_idle_exit") and value is not None}


def mode(env: Mapping[str, str], config: Mapping[str, str] | None = None) -> str:
    """"auto" (forward, and start a daemon when none answers), "manual" (forward to one
    started by hand) or "off" (every command in-process)."""
    if env.get("MEMCLI_NO_DAEMON", "") not in ("", "0"):
        return "off"
    config = config_values(env) if config is None else config
    chosen = config.get("daemon", "auto")
    chosen = "off" if chosen in _FALSE else ("auto" if chosen in ("on", "true", "yes")
                                             else chosen)
    if chosen not in MODES:
        chosen = "auto"  # the app's settings name the mistake (memcli.config)
    if chosen == "auto" and env.get("MEMCLI_AUTOSTART", "").lower() in _FALSE:
        return "manual"
    return chosen


def idle_exit(env: Mapping[str, str], config: Mapping[str, str]) -> float:
    """Minutes an auto-started daemon waits for a request before it exits."""
    for text in (env.get("MEMCLI_DAEMON_IDLE_EXIT"), config.get("daemon_idle_exit")):
        try:
            value = float(text or "")
        except ValueError:
            continue
        if value > 0:
            return value
    return DEFAULT_IDLE_EXIT


# What an auto-started daemon gets of the environment of the command that started it
# (docs/guides/daemon.md): what Python needs to find and run memcli (its search path, the
# user's folders, locale, the temporary folder, the native libraries' thread settings), what
# reaches a model API (CA files, proxies), and memcli's settings of the memory as a whole
# (paths.SETTING_NAMES: models, LLM, categories, the key of `high` content, which also make the
# daemon's key). Not a database (each command brings its own, and its libpq PG* variables), not
# the scope the command ran with (MEMCLI_TENANT, _USER, _AGENT, _APP: a request brings its own,
# else the config file's), not the client's routing (MEMCLI_SOCKET, _NO_DAEMON, _AUTOSTART),
# and nothing of other tools (their tokens): the daemon serves requests, not its starter.
DAEMON_NAMES = frozenset({
    "PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE",
    "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "VIRTUAL_ENV",
    "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
    "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR",
    "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
    "ORT_DISABLE_TELEMETRY", "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
    "SSL_CERT_FILE", "SSL_CERT_DIR", *paths.SETTING_NAMES,
})


def daemon_env(env: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of the user's daemon started from a command whose environment
    is `env`: the allowlist above (memcli's settings as `paths.user_key` counted them, paths
    made absolute: the daemon works from `/`) and the config file's path. No database: each
    command names its own."""
    given = {key: value for key, value in env.items()
             if key in DAEMON_NAMES or key.startswith("LC_") or key.lower().endswith("_proxy")}
    given.update(paths.settings_in(env))
    return {**given, "MEMCLI_CONFIG": os.path.abspath(paths.config_file(env))}


def wants_daemon(argv: Sequence[str]) -> bool:
    """Whether this command line may start a daemon (see the module docstring)."""
    end = list(argv).index("--") if "--" in argv else len(argv)
    if any(a in HELP_WORDS for a in argv[:end]):
        return False
    words = [a for a in paths.root_db(argv[:end])[1] if not a.startswith("-")]
    if not words or words[0] in NEVER_STARTED:
        return False
    return True


def _take_lock(ep: paths.Endpoint) -> int | None:
    """The daemon lock of `ep`, held (an fd), or None when a process holds it: a daemon is
    starting, serving or stopping."""
    import fcntl  # noqa: PLC0415 - only on this route: a forwarded command never needs it

    try:
        fd = os.open(ep.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def maybe_start(argv: Sequence[str], socket_path: str,
                env: Mapping[str, str] | None = None) -> int | None:
    """Start the user's daemon listening on `socket_path` when this command line and the
    settings allow it; its pid, or None when none was started."""
    env = os.environ if env is None else env
    config = config_values(env)
    if mode(env, config) != "auto" or not wants_daemon(argv):
        return None
    ep = paths.endpoint_for_socket(socket_path)
    try:
        paths.ensure_private_dir(os.path.dirname(ep.socket))
    except paths.RuntimeDirError as exc:
        paths.warn_untrusted(paths.UntrustedSocket(os.path.dirname(ep.socket), str(exc)))
        return None
    lock = _take_lock(ep)
    if lock is None:
        return None
    try:
        return start(ep, env, idle_exit(env, config), lock)
    finally:
        os.close(lock)  # the daemon-to-be holds it now (the same open file)


def start(ep: paths.Endpoint, env: Mapping[str, str], idle_minutes: float,
          lock: int) -> int | None:
    """`memcli serve --all-databases` on `ep`, detached (see the module docstring); its pid, or None
    when it could not be started (the command runs in-process all the same). `lock`: the
    daemon lock, taken; the daemon-to-be holds it, and `memcli serve` after it (so a command
    that arrives meanwhile starts no second daemon)."""
    child_env = daemon_env(env)
    argv = [sys.executable, "-m", "memcli", "serve", "--all-databases", "--socket", ep.socket,
            "--idle-exit", f"{idle_minutes:g}", "--auto-started", "--lock-fd", str(LOCK_FD)]
    try:
        log_fd = _open_log(ep.log)
        read_pid, write_pid = os.pipe()
        # Open in this process until it exits (never closed here, and close-on-exec): the
        # daemon-to-be waits for its end before it starts.
        caller_gone, _caller = os.pipe()
    except OSError:
        return None
    pid = os.fork()
    if pid == 0:  # the first child: a new session, then the daemon's own process
        try:
            os.close(read_pid)
            os.setsid()
            daemon = os.fork()
            if daemon:
                os.write(write_pid, str(daemon).encode())
                os._exit(0)
            os.close(write_pid)
            os.close(_caller)
            _become_daemon(ep, log_fd, lock, caller_gone)
            os.execve(sys.executable, argv, child_env)
        finally:
            os._exit(127)
    os.close(write_pid)
    os.close(log_fd)
    os.close(caller_gone)
    try:
        os.waitpid(pid, 0)
        data = os.read(read_pid, 32)
    except OSError:
        data = b""
    finally:
        os.close(read_pid)
    return int(data) if data.isdigit() else None


def _become_daemon(ep: paths.Endpoint, log_fd: int, lock: int, caller_gone: int) -> None:
    """In the daemon-to-be: write the pidfile (its pid stays that of `memcli serve`), detach
    from the caller's folder and stdio, and wait until the command that started it has ended
    (at most CALLER_WAIT s): the command runs in-process at full speed, never beside the
    daemon's warm-up (on two busy cores that cost a first `acb build` 1.6x its in-process
    time); then close every fd but 0-2 and the lock, which `memcli serve` keeps as fd
    `LOCK_FD` (`--lock-fd`): the lock is never free between the two, so a command that comes
    meanwhile starts no second daemon."""
    import select  # noqa: PLC0415 - the forwarded command's start-up

    with open(ep.pid + ".tmp", "w", encoding="ascii") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(ep.pid + ".tmp", ep.pid)
    os.chdir("/")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    select.select([caller_gone], [], [], CALLER_WAIT)
    if lock != LOCK_FD:
        os.dup2(lock, LOCK_FD)  # inheritable: `memcli serve` holds it on
    else:
        os.set_inheritable(LOCK_FD, True)
    # Every other fd the caller had (a pipe its own caller reads to the end): the daemon must
    # not keep them open.
    os.closerange(LOCK_FD + 1, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024)


def _open_log(path: str) -> int:
    """The daemon's log, appended to (emptied first when it passed LOG_LIMIT), 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    if os.fstat(fd).st_size > LOG_LIMIT:
        os.ftruncate(fd, 0)
    return fd
