"""The Kubernetes example (examples/kubernetes) as the manifest tests read
it: each overlay rendered with `kubectl kustomize` and looked up by kind
and name (Overlay), and what every check compares the objects with, made
once (Context): the built rdzv and rdzvd's flags, a real assignment's env
file, the Secrets make-secrets.sh makes. The tests are
test_manifests.py (every overlay), test_manifests_ha.py (the HA variant,
rdzvd on etcd) and test_make_secrets.py; each takes the same options
(options()) and reports through tests/lib/rdzvtest."""
import argparse
import functools
import os
import re
import shlex
import shutil
import subprocess
import tempfile

import yaml

import rdzvtest
from rdzvtest import Skip

OVERLAYS = ["statefulset", "lws", "ha"]
# Variants whose rdzvd keeps its journal in etcd (rdzvd --etcd) and runs
# active/standby; test_manifests_ha.py checks them as well.
HA_OVERLAYS = {"ha"}

# Variables LWS puts in every container ahead of the Pod's own.
LWS_VARS = {"LWS_WORKER_INDEX": "1", "LWS_LEADER_ADDRESS": "llm-0.llm.ns", "LWS_GROUP_SIZE": None}


def flag_value(args, flag):
    """Value of --flag VALUE or --flag=VALUE in an argument list; None if absent."""
    for i, a in enumerate(args):
        if a == flag:
            return args[i + 1] if i + 1 < len(args) else None
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None

def flags_in(args):
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]

def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}

def mount_dir(container, volume):
    for m in container.get("volumeMounts", []):
        if m["name"] == volume:
            return m["mountPath"]
    return None

def volume_at(container, path):
    """Name of the volume mounted at the directory holding path."""
    best = None
    for m in container.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best[0]):
                best = (mp, m["name"])
    return best[1] if best else None

def script_of(container):
    """The shell script a container runs with sh -c, or ""."""
    cmd = container.get("command", []) + container.get("args", [])
    if len(cmd) >= 3 and cmd[0].endswith("sh") and cmd[1] == "-c":
        return cmd[2]
    return ""

def script_words(script):
    return shlex.split(script.replace("\\\n", " "), comments=True)

def expand(value, env):
    """Kubernetes' $(VAR) expansion: defined names are replaced, $$ is a
    literal $, anything else stays as written."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else
                  env.get(m.group(1), m.group(0)), value)

class Overlay:
    """One overlay rendered by kubectl kustomize."""

    def __init__(self, kdir, name):
        self.name = name
        self.text = render(os.path.join(kdir, name))
        self.docs = [d for d in yaml.safe_load_all(self.text) if d]

    def objects(self, kind):
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind, name):
        found = [d for d in self.objects(kind) if d["metadata"]["name"] == name]
        assert len(found) == 1, f"{self.name}: want one {kind} {name}, found {len(found)}"
        return found[0]

    def settings(self):
        return self.one("ConfigMap", "rdzv-settings")["data"]

    def env(self, container, lws_size=None):
        """The container's environment as the kubelet builds it: envFrom
        ConfigMaps, then env in order with $(VAR) expanded; downward-API
        fields as <fieldRef:PATH>."""
        env = {}
        if self.workload()["kind"] == "LeaderWorkerSet":
            env.update({k: v for k, v in LWS_VARS.items() if v})
            env["LWS_GROUP_SIZE"] = str(self.world_of_workload())
        for src in container.get("envFrom", []):
            env.update(self.one("ConfigMap", src["configMapRef"]["name"])["data"])
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            else:
                env[e["name"]] = "<fieldRef:%s>" % e["valueFrom"]["fieldRef"]["fieldPath"]
        return env

    def args(self, container):
        env = self.env(container)
        return [expand(a, env) for a in container.get("args", [])]

    def rdzvd(self):
        dep = self.one("Deployment", "rdzvd")
        return dep, dep["spec"]["template"]["spec"]["containers"][0]

    def rdzvd_args(self):
        return self.args(self.rdzvd()[1])

    def etcd(self):
        """The StatefulSet that runs etcd (HA variants), or None."""
        found = [s for s in self.objects("StatefulSet") if is_etcd(s)]
        assert len(found) <= 1, f"{self.name}: {len(found)} etcd StatefulSets"
        return found[0] if found else None

    def workload(self):
        found = [s for s in self.objects("StatefulSet") if not is_etcd(s)] + \
            self.objects("LeaderWorkerSet")
        assert len(found) == 1, f"{self.name}: want one rank workload, found {len(found)}"
        return found[0]

    def world_of_workload(self):
        w = self.workload()
        return w["spec"]["replicas"] if w["kind"] == "StatefulSet" \
            else w["spec"]["leaderWorkerTemplate"]["size"]

    def pod(self):
        w = self.workload()
        return w["spec"]["template"]["spec"] if w["kind"] == "StatefulSet" \
            else w["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]

    def agent_and_engine(self):
        pod = self.pod()
        agents = [c for c in pod.get("initContainers", []) if (c.get("args") or [None])[0] == "agent"]
        assert len(agents) == 1, f"{self.name}: want exactly one `rdzv agent` init container"
        engines = [c for c in pod["containers"] if "vllm serve" in script_of(c)]
        assert len(engines) == 1, f"{self.name}: want exactly one container running vllm serve"
        return agents[0], engines[0]

def is_etcd(sts):
    return any(os.path.basename((c.get("command") or [""])[0]) == "etcd"
               for c in sts["spec"]["template"]["spec"]["containers"])

def render(path):
    p = subprocess.run(["kubectl", "kustomize", path], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"kubectl kustomize {path}: {p.stderr.strip()}"
    return p.stdout


class Context:
    """What the checks compare the manifests with, each part made when a
    check first asks for it."""

    def __init__(self, root, rdzv, rdzvd):
        self.root = root
        self.kdir = os.path.join(root, "examples", "kubernetes")
        self.rdzv = rdzv
        self.rdzvd = rdzvd
        if not shutil.which("kubectl"):
            raise Skip("kubectl is not installed (kubectl kustomize renders the overlays)")
        self.rendered = {}
        self.etcd = shutil.which("etcd")

    def overlay(self, name):
        if name not in self.rendered:
            self.rendered[name] = Overlay(self.kdir, name)
        return self.rendered[name]

    @functools.cached_property
    def rdzvd_help(self):
        return subprocess.run([self.rdzvd, "--help"], capture_output=True, text=True).stdout

    @functools.cached_property
    def agent_help(self):
        return subprocess.run([self.rdzv, "agent", "--help"], capture_output=True,
                              text=True).stdout

    @functools.cached_property
    def etcd_help(self):
        if not self.etcd:
            return ""
        p = subprocess.run([self.etcd, "--help"], capture_output=True, text=True)
        return p.stdout + p.stderr

    @functools.cached_property
    def etcd_version(self):
        if not self.etcd:
            return None
        m = re.search(r"etcd Version: (\d+)\.(\d+)\.(\d+)",
                      subprocess.run([self.etcd, "--version"], capture_output=True,
                                     text=True).stdout)
        return tuple(int(x) for x in m.groups()) if m else None

    @functools.cached_property
    def binary_strings(self):
        """Printable runs of the rdzv binary, librdzv and the shim."""
        blobs = []
        bdir = os.path.dirname(os.path.dirname(self.rdzv))
        for path in [self.rdzv, os.path.join(bdir, "client", "librdzv.so"),
                     os.path.join(bdir, "shim", "librdzv_shim.so")]:
            if os.path.exists(path):
                with open(path, "rb") as f:
                    blobs.append(f.read())
        return set(m.decode() for b in blobs for m in re.findall(rb"[A-Z][A-Z0-9_]{3,}", b))

    @functools.cached_property
    def env_text(self):
        """A real `rdzv join --format env` against a real rdzvd, with the
        example's port settings."""
        s = self.overlay(OVERLAYS[0]).settings()
        with tempfile.TemporaryDirectory() as tmp:
            d = rdzvtest.Rdzvd(self.rdzvd, tmp, "--no-nccl", "--port-base", s["PORT_BASE"],
                               "--port-limit", s["PORT_LIMIT"],
                               "--ports-per-rank", s["PORTS_PER_RANK"])
            try:
                return subprocess.run([self.rdzv, "join", "--server", d.endpoint, "--group", "m",
                                       "--world", "1", "--rank", "0", "--format", "env",
                                       "--timeout", "20"],
                                      capture_output=True, text=True, timeout=30, check=True).stdout
            finally:
                d.stop()

    @functools.cached_property
    def env_names(self):
        return {line.split("=", 1)[0] for line in self.env_text.splitlines() if "=" in line}

    @functools.cached_property
    def secrets(self):
        """Secret name -> file keys, from a real `make-secrets.sh --print`."""
        return {d["metadata"]["name"]: set(d["data"]) for d in self.print_secrets()}

    def print_secrets(self, path=None):
        env = dict(os.environ, RDZV=self.rdzv)
        if path:
            env["PATH"] = path
        p = subprocess.run(["/bin/sh", os.path.join(self.kdir, "make-secrets.sh"), "--print"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return [d for d in yaml.safe_load_all(p.stdout) if d]


def render_with(ctx, name, values=None, components=()):
    """Overlay name rendered from a copy of the example whose settings
    have values (KEY -> text) in place of their own and name components
    (cache-pvc, ...) the way settings/kustomization.yaml says to: by
    taking the comment marks off their lines."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "k")
        shutil.copytree(ctx.kdir, copy)
        path = os.path.join(copy, "settings", "kustomization.yaml")
        with open(path) as f:
            text = f.read()
        for k, v in (values or {}).items():
            text, n = re.subn(r"^(\s*)- %s=.*$" % k, lambda m: "%s- %s=%s" % (m.group(1), k, v),
                              text, flags=re.M)
            assert n == 1, f"settings have {n} {k}"
        if components:
            text, n = re.subn(r"^# components:$", "components:", text, flags=re.M)
            assert n == 1, "settings have no commented components: line"
            for c in components:
                text, n = re.subn(r"^#(\s+- %s)\b" % re.escape(c), r" \1", text, flags=re.M)
                assert n == 1, f"settings do not offer component {c}"
        with open(path, "w") as f:
            f.write(text)
        return Overlay(copy, name)


def http_port(ov):
    value = flag_value(ov.rdzvd_args(), "--http")
    assert value, "rdzvd has no --http"
    return int(value.rsplit(":", 1)[-1])


def bind_port(ov):
    return int(flag_value(ov.rdzvd_args(), "--bind").rsplit(":", 1)[-1])


def options():
    """The command line every manifest test takes."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--rdzv", required=True)
    ap.add_argument("--rdzvd", required=True)
    return ap.parse_args()


def run(per_overlay, overlays=OVERLAYS, whole=()):
    """Each check of per_overlay on each of overlays, named "OVERLAY NAME",
    then each of whole, named NAME; a check function is named PREFIX_NAME.
    The exit status, or SKIP when the example cannot be rendered here."""
    opts = options()
    try:
        ctx = Context(opts.source_root, opts.rdzv, opts.rdzvd)
    except Skip as e:
        return rdzvtest.skip_all(e)
    cases = [(ov + " " + c.__name__.split("_", 1)[1], functools.partial(c, ctx, ctx.overlay(ov)))
             for ov in overlays for c in per_overlay]
    cases += [(c.__name__.split("_", 1)[1], functools.partial(c, ctx)) for c in whole]
    return rdzvtest.run(cases)
