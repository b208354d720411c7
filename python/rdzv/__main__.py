"""python -m rdzv join ...: `rdzv join` in Python, for images that have
the package but not the rdzv command. Same flags, variables, output
formats and exit status (0; 1 error; 2 usage; 3 timeout; 4 refused)."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import List, Optional

from .client import Client
from .errors import RdzvError, Refused, Timeout, UsageError

EXIT_ERROR, EXIT_USAGE, EXIT_TIMEOUT, EXIT_REFUSED = 1, 2, 3, 4


def _env_lines(env: dict, export: bool) -> str:
    """KEY=VALUE lines a shell can source (a value quoted when it needs it)."""
    return "".join("%s%s=%s\n" % ("export " if export else "", k, shlex.quote(v))
                   for k, v in env.items())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rdzv", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    j = sub.add_parser("join", help="join a group; print the assignment or run CMD with it")
    env = os.environ.get
    j.add_argument("--server", default=env("RDZV_SERVER", "tcp://127.0.0.1:29400"))
    j.add_argument("--group", default=env("RDZV_GROUP"))
    j.add_argument("--world", type=int, default=env("RDZV_WORLD"))
    j.add_argument("--rank", type=int, default=env("RDZV_RANK"))
    j.add_argument("--host", default=env("RDZV_HOST"))
    j.add_argument("--node", default=env("RDZV_NODE"))
    j.add_argument("--timeout", type=float, help="seconds (default 60)")
    j.add_argument("--nccl-id", choices=("server", "rank0", "none"))
    j.add_argument("--members", action="store_true")
    j.add_argument("--replace", action="store_true")
    j.add_argument("--format", choices=("json", "env", "export", "vllm-args"), default="json")
    j.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...: run CMD with the assignment")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    p = _parser()
    a = p.parse_args(argv)
    for flag, var in (("group", "RDZV_GROUP"), ("world", "RDZV_WORLD"), ("rank", "RDZV_RANK")):
        if getattr(a, flag) is None:
            p.error("--%s (or %s) is required" % (flag, var))
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    try:
        with Client(a.server, members=a.members, replace=a.replace) as client:
            asg = client.join(a.group, int(a.world), int(a.rank), host=a.host, node=a.node,
                              timeout=a.timeout, nccl_id=a.nccl_id)
    except UsageError as e:
        print("python -m rdzv join: %s" % e, file=sys.stderr)
        return EXIT_USAGE
    except Timeout as e:
        print("python -m rdzv join: timed out: %s" % e, file=sys.stderr)
        return EXIT_TIMEOUT
    except Refused as e:
        print("python -m rdzv join: refused (%s): %s" % (e.code, e), file=sys.stderr)
        return EXIT_REFUSED
    except RdzvError as e:
        print("python -m rdzv join: %s" % e, file=sys.stderr)
        return EXIT_ERROR
    env = dict(asg.env, RDZV_SERVER=a.server)
    if cmd:
        os.environ.update(env)
        try:
            os.execvp(cmd[0], cmd)
        except OSError as e:
            print("python -m rdzv join: cannot run %s: %s" % (shlex.quote(cmd[0]), e),
                  file=sys.stderr)
            return 127
    if a.format == "json":
        sys.stdout.write(asg.json + "\n")
    elif a.format == "vllm-args":
        if not asg.vllm_args:
            print("python -m rdzv join: the assignment names no DP RPC port", file=sys.stderr)
            return EXIT_ERROR
        sys.stdout.write(env["RDZV_VLLM_ARGS"] + "\n")
    else:
        sys.stdout.write(_env_lines(env, a.format == "export"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
