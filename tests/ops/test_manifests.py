#!/usr/bin/env python3
"""The Kubernetes example as a user applies it: each overlay of
examples/kubernetes rendered with `kubectl kustomize`, every object checked
against the official Kubernetes schemas (tests/ops/k8s/validate.mjs,
LeaderWorkerSets against their CRD's structure), and the wiring checked
against the built rdzv and rdzvd and a real rdzvd on loopback: flags,
variables, the assignment's env file, ports, native-sidecar order, probes,
settings made once. The engine's start script and liveness probe run in a
real shell with a stand-in for vllm. The HA variant (rdzvd on etcd) also
has its etcd members' names, URLs, budget and policy checked against each
other and against rdzvd's --etcd, and its etcd and rdzvd run for real on
loopback with the manifests' arguments: a cluster forms, one rdzvd leads,
another takes over when it stops. Prints TAP."""
import argparse
import base64
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

OVERLAYS = ["statefulset", "lws", "ha"]
# Variants whose rdzvd keeps its journal in etcd (rdzvd --etcd) and runs
# active/standby; they get HA_CHECKS as well.
HA_OVERLAYS = {"ha"}
# rdzvd's flags of that mode.
HA_RDZVD_FLAGS = {"--etcd", "--etcd-prefix", "--etcd-ca", "--etcd-cert", "--etcd-key",
                  "--etcd-lease", "--advertise"}
# etcd 3.5.11 brought /livez and /readyz, which the probes use.
ETCD_MIN_VERSION = (3, 5, 11)
MAX_INT32 = 2 ** 31 - 1            # progressDeadlineSeconds: no deadline
# The data-parallel flags come from the assignment's RDZV_VLLM_ARGS
# (check_engine_script_runs expands them); the rest are the example's.
ENGINE_FLAGS = ["$RDZV_VLLM_ARGS", "--tensor-parallel-size", "--enable-expert-parallel"]
# Variables LWS puts in every container ahead of the Pod's own.
LWS_VARS = {"LWS_WORKER_INDEX": "1", "LWS_LEADER_ADDRESS": "llm-0.llm.ns", "LWS_GROUP_SIZE": None}
SHELL_VARS = {"HOME", "PATH"}
EPHEMERAL = (32768, 60999)          # the kernel's default ip_local_port_range


class Skip(Exception):
    pass


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
    def __init__(self, root, rdzv, rdzvd):
        self.root = root
        self.kdir = os.path.join(root, "examples", "kubernetes")
        self.rdzv = rdzv
        self.rdzvd = rdzvd
        if not shutil.which("kubectl"):
            raise Skip("kubectl is not installed (kubectl kustomize renders the overlays)")
        self.overlays = [Overlay(self.kdir, o) for o in OVERLAYS]
        self.rdzvd_help = subprocess.run([rdzvd, "--help"], capture_output=True, text=True).stdout
        self.agent_help = subprocess.run([rdzv, "agent", "--help"], capture_output=True,
                                         text=True).stdout
        self.binary_strings = self._strings()
        self.etcd = shutil.which("etcd")
        self.etcd_help, self.etcd_version = "", None
        if self.etcd:
            p = subprocess.run([self.etcd, "--help"], capture_output=True, text=True)
            self.etcd_help = p.stdout + p.stderr
            m = re.search(r"etcd Version: (\d+)\.(\d+)\.(\d+)",
                          subprocess.run([self.etcd, "--version"], capture_output=True,
                                         text=True).stdout)
            self.etcd_version = tuple(int(x) for x in m.groups()) if m else None
        self.env_text = self._assignment_env()
        self.env_names = {line.split("=", 1)[0] for line in self.env_text.splitlines() if "=" in line}
        self.secrets = self._secrets_made()

    def _strings(self):
        """Printable runs of the rdzv binary, librdzv and the shim."""
        blobs = []
        bdir = os.path.dirname(os.path.dirname(self.rdzv))
        for path in [self.rdzv, os.path.join(bdir, "client", "librdzv.so"),
                     os.path.join(bdir, "shim", "librdzv_shim.so")]:
            if os.path.exists(path):
                with open(path, "rb") as f:
                    blobs.append(f.read())
        return set(m.decode() for b in blobs for m in re.findall(rb"[A-Z][A-Z0-9_]{3,}", b))

    def _assignment_env(self):
        """A real `rdzv join --format env` against a real rdzvd, with the
        example's port settings."""
        s = self.overlays[0].settings()
        with tempfile.TemporaryDirectory() as tmp:
            epfile = os.path.join(tmp, "endpoint")
            proc = subprocess.Popen([self.rdzvd, "--bind", "tcp://127.0.0.1:*", "--endpoint-file",
                                     epfile, "--state-dir", os.path.join(tmp, "state"), "--no-nccl",
                                     "--port-base", s["PORT_BASE"], "--port-limit", s["PORT_LIMIT"],
                                     "--ports-per-rank", s["PORTS_PER_RANK"]],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                deadline = time.time() + 20
                while not os.path.exists(epfile) and time.time() < deadline:
                    time.sleep(0.05)
                with open(epfile) as f:
                    endpoint = f.read().strip()
                return subprocess.run([self.rdzv, "join", "--server", endpoint, "--group", "m",
                                       "--world", "1", "--rank", "0", "--format", "env",
                                       "--timeout", "20"],
                                      capture_output=True, text=True, timeout=30, check=True).stdout
            finally:
                proc.terminate()
                proc.wait(timeout=10)

    def _secrets_made(self):
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


# --- checks: each runs on every overlay ---

def check_official_schemas(ctx, ov):
    """Every rendered object against the official schemas (LWS: its CRD's structure)."""
    k8s = os.path.join(ctx.root, "tests", "ops", "k8s")
    if not os.path.isdir(os.path.join(k8s, "node_modules")):
        raise Skip("tests/ops/k8s has no node_modules (npm ci --prefix tests/ops/k8s)")
    p = subprocess.run(["node", os.path.join(k8s, "validate.mjs")], input=ov.text,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (p.stdout + p.stderr).strip()
    return "%d objects" % sum(1 for line in p.stdout.splitlines() if line.startswith("ok "))


def check_rdzvd_deployment(ctx, ov):
    dep, c = ov.rdzvd()
    args = ov.rdzvd_args()
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"].get("volumes", [])}
    if ov.name in HA_OVERLAYS:
        replicas = dep["spec"]["replicas"]
        assert replicas >= 3, f"{replicas} rdzvd: one lost leaves no standby"
        assert flag_value(args, "--etcd"), "an HA variant's rdzvd has no --etcd"
        assert flag_value(args, "--state-dir") is None, "--state-dir with --etcd"
        assert not any("persistentVolumeClaim" in v for v in vols.values()), \
            "rdzvd mounts a claim: its journal is in etcd"
        assert not ov.objects("PersistentVolumeClaim"), "a claim nothing uses"
        # Only the leader is ever Ready: a rollout that keeps any replica
        # available waits for a standby to become Ready, for good.
        st = dep["spec"]["strategy"]
        assert st["type"] == "RollingUpdate", st
        mu = st.get("rollingUpdate", {}).get("maxUnavailable")
        assert mu == "100%" or (isinstance(mu, int) and mu >= replicas), \
            f"maxUnavailable {mu}: the rollout would stall behind the old leader"
        assert dep["spec"].get("progressDeadlineSeconds") == MAX_INT32, \
            "a rollout never completes (two replicas are never Ready): it must have no deadline"
    else:
        assert dep["spec"]["replicas"] == 1
        assert dep["spec"]["strategy"]["type"] == "Recreate", "a rolling update would run two rdzvd"
        vol = volume_at(c, flag_value(args, "--state-dir"))
        ov.one("PersistentVolumeClaim", vols[vol]["persistentVolumeClaim"]["claimName"])
    missing = [f for f in flags_in(args) if f not in ctx.rdzvd_help]
    unbuilt = [f for f in missing if f in HA_RDZVD_FLAGS] if "--etcd" not in ctx.rdzvd_help else []
    missing = [f for f in missing if f not in unbuilt]
    assert not missing, f"rdzvd --help has no {', '.join(missing)}"
    s = ov.settings()
    for flag, key in (("--port-base", "PORT_BASE"), ("--port-limit", "PORT_LIMIT"),
                      ("--ports-per-rank", "PORTS_PER_RANK")):
        assert flag_value(args, flag) == s[key], f"rdzvd {flag} {flag_value(args, flag)}, not {key}"
    if unbuilt:
        raise Skip("this rdzvd was built without --etcd (libcurl): %s not checked" % " ".join(unbuilt))


def http_port(ov):
    value = flag_value(ov.rdzvd_args(), "--http")
    assert value, "rdzvd has no --http"
    return int(value.rsplit(":", 1)[-1])


def check_rdzvd_probes_and_metrics_port(ctx, ov):
    dep, c = ov.rdzvd()
    port = http_port(ov)
    host = flag_value(ov.rdzvd_args(), "--http").rsplit(":", 1)[0]
    assert host in ("0.0.0.0", "[::]"), "probes come from the kubelet: --http must not be loopback"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"]["port"] == port, f"{probe} is not on --http's port {port}"
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and int(ann["prometheus.io/port"]) == port
    assert ann["prometheus.io/path"] == "/metrics"
    assert port in [p["containerPort"] for p in c["ports"]]


def bind_port(ov):
    return int(flag_value(ov.rdzvd_args(), "--bind").rsplit(":", 1)[-1])


def check_rdzvd_service(ctx, ov):
    ports = [p["port"] for p in ov.one("Service", "rdzvd")["spec"]["ports"]]
    assert bind_port(ov) in ports and http_port(ov) in ports, ports


def check_rdzvd_secrets(ctx, ov):
    dep, c = ov.rdzvd()
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    for flag in ("--curve-secret", "--clients", "--group-token", "--http-token"):
        path = flag_value(ov.rdzvd_args(), flag)
        assert path, f"rdzvd lacks {flag}"
        secret = vols[volume_at(c, path)]["secret"]["secretName"]
        assert secret in ctx.secrets, f"make-secrets.sh does not make {secret}"
        if flag != "--clients":
            assert os.path.basename(path) in ctx.secrets[secret], f"{secret} has no {path}"


def check_native_sidecar(ctx, ov):
    pod = ov.pod()
    agent, _ = ov.agent_and_engine()
    assert agent.get("restartPolicy") == "Always", "the agent is not a native sidecar"
    names = [c["name"] for c in pod["initContainers"]]
    for c in pod["initContainers"]:
        if c.get("restartPolicy") != "Always":
            # A run-to-completion init container after the sidecar would
            # wait for the assignment; before it, it must not need it.
            assert names.index(c["name"]) < names.index(agent["name"]), \
                f"{c['name']} runs after the agent sidecar"
    probe = agent["startupProbe"]["exec"]["command"]
    sock = flag_value(agent["args"], "--socket")
    assert probe == ["test", "-S", sock], f"startup probe {probe} is not on {sock}"


def check_socket_path_everywhere(ctx, ov):
    pod = ov.pod()
    agent, engine = ov.agent_and_engine()
    sock = flag_value(agent["args"], "--socket")
    assert ov.env(engine)["RDZV_AGENT_SOCKET"] == sock
    words = script_words(script_of(engine))
    sourced = [words[i + 1] for i, w in enumerate(words) if w in (".", "source")]
    assert sourced == [sock + ".env"], f"the engine sources {sourced}"
    shared = volume_at(agent, sock)
    assert shared and volume_at(engine, sock) == shared, "socket dir not shared"
    assert mount_dir(agent, shared) == mount_dir(engine, shared) == os.path.dirname(sock)
    assert "emptyDir" in {v["name"]: v for v in pod["volumes"]}[shared], f"{shared} is not an emptyDir"


def check_agent_flags_and_variables(ctx, ov):
    agent, _ = ov.agent_and_engine()
    for flag in flags_in(agent["args"]):
        assert flag in ctx.agent_help, f"rdzv agent --help has no {flag}"
    env = ov.env(agent)
    for name in env_of(agent):
        if name.startswith("RDZV_"):
            assert name in ctx.binary_strings, f"no binary reads {name}"
    for name in ("RDZV_SERVER", "RDZV_GROUP", "RDZV_WORLD", "RDZV_RANK"):
        assert name in env, f"agent lacks {name}"
        assert "$(" not in env[name], f"{name}={env[name]} refers to an unset variable"


def check_agent_reaches_rdzvd(ctx, ov):
    svc = ov.one("Service", "rdzvd")
    agent, _ = ov.agent_and_engine()
    m = re.fullmatch(r"tcp://([^:]+):(\d+)", ov.env(agent)["RDZV_SERVER"])
    assert m and m.group(1).split(".")[0] == svc["metadata"]["name"]
    assert int(m.group(2)) in [p["port"] for p in svc["spec"]["ports"]]
    assert int(m.group(2)) == bind_port(ov)


def check_agent_secrets(ctx, ov):
    pod = ov.pod()
    agent, engine = ov.agent_and_engine()
    vols = {v["name"]: v for v in pod["volumes"]}
    env = ov.env(agent)
    for name in ("RDZV_CURVE_SERVER_PUBLIC", "RDZV_CURVE_SECRET", "RDZV_GROUP_TOKEN"):
        path = env.get(name)
        assert path, f"agent lacks {name}"
        secret = vols[volume_at(agent, path)]["secret"]["secretName"]
        assert os.path.basename(path) in ctx.secrets.get(secret, ()), \
            f"{name}={path} is not a key of Secret {secret}"
        assert volume_at(engine, path) is None, f"the engine mounts {secret}"


def check_uids(ctx, ov):
    agent, engine = ov.agent_and_engine()
    a_uid = agent["securityContext"]["runAsUser"]
    e_uid = engine["securityContext"]["runAsUser"]
    assert a_uid != e_uid, f"agent and engine share uid {a_uid}"
    allowed = [int(agent["args"][i + 1]) for i, a in enumerate(agent["args"]) if a == "--allow-uid"]
    assert allowed == [e_uid], f"--allow-uid {allowed}, engine uid {e_uid}"
    # A non-root agent leaves PATH.env mode 0640 in its own group (the image
    # knows no engine uid): the engine must be in that group to read it.
    a_gid = agent["securityContext"]["runAsGroup"]
    e_groups = {engine["securityContext"].get("runAsGroup")} | set(
        ov.pod().get("securityContext", {}).get("supplementalGroups", []))
    assert a_gid in e_groups, f"the engine (groups {sorted(e_groups)}) cannot read the agent's " \
                              f"0640 env file of group {a_gid}"


def check_engine_command(ctx, ov):
    pod = ov.pod()
    _, engine = ov.agent_and_engine()
    words = script_words(script_of(engine))
    for flag in ENGINE_FLAGS:
        assert flag in words, f"vllm serve lacks {flag}"
    assert "$((" not in script_of(engine), "port arithmetic in the engine's script"
    assert flag_value(words, "--tensor-parallel-size") == "$TP"
    tp = ov.env(engine)["TP"]
    assert str(engine["resources"]["limits"]["nvidia.com/gpu"]) == tp, "GPUs per Pod are not TP"
    preload = ov.env(engine)["LD_PRELOAD"]
    assert preload.endswith("/librdzv_shim.so"), preload
    writers = [c for c in pod["initContainers"] if mount_dir(c, volume_at(engine, preload))]
    assert writers, "nothing puts the shim where LD_PRELOAD points"


def check_engine_variables_exist(ctx, ov):
    """Every $VAR the engine's script reads is set by someone."""
    _, engine = ov.agent_and_engine()
    used = set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", script_of(engine)))
    missing = used - ctx.env_names - set(ov.env(engine)) - SHELL_VARS
    assert not missing, f"nobody sets {sorted(missing)}"


def check_world_set_once(ctx, ov):
    agent, _ = ov.agent_and_engine()
    world = ov.settings()["WORLD"]
    w = ov.workload()
    assert str(ov.world_of_workload()) == world, f"{w['kind']} has {ov.world_of_workload()} ranks, WORLD={world}"
    assert ov.env(agent)["RDZV_WORLD"] == world
    if w["kind"] == "StatefulSet":
        assert w["spec"]["podManagementPolicy"] == "Parallel"
        assert ov.env(agent)["RDZV_RANK"] == "<fieldRef:metadata.labels['apps.kubernetes.io/pod-index']>"
    else:
        assert w["spec"].get("startupPolicy", "LeaderCreated") == "LeaderCreated"
        assert w["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
        assert env_of(agent)["RDZV_RANK"]["value"] == "$(LWS_WORKER_INDEX)"


def check_images_set_once(ctx, ov):
    """Every image is one the settings name, with its tag: none left as a placeholder."""
    with open(os.path.join(ctx.kdir, "settings", "kustomization.yaml")) as f:
        images = yaml.safe_load(f)["images"]
    want = {"%s:%s" % (i["newName"], i["newTag"]) for i in images}
    pod = ov.pod()
    used = {c["image"] for c in pod.get("initContainers", []) + pod["containers"]}
    used.add(ov.rdzvd()[1]["image"])
    assert used == want, f"images {sorted(used)}, settings {sorted(want)}"


def check_settings_reach_everything(ctx, ov):
    """Changing each value in the settings alone changes every place that uses it."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "k")
        shutil.copytree(ctx.kdir, copy)
        path = os.path.join(copy, "settings", "kustomization.yaml")
        with open(path) as f:
            text = f.read()
        new = {"GROUP": "other", "WORLD": "8", "TP": "4", "PORT_BASE": "20000",
               "PORT_LIMIT": "30000", "PORTS_PER_RANK": "16"}
        for k, v in new.items():
            text, n = re.subn(r"- %s=\S+" % k, "- %s=%s" % (k, v), text)
            assert n == 1, f"settings have {n} {k}"
        text = text.replace("newTag: 0.1.0", "newTag: 9.9.9")
        with open(path, "w") as f:
            f.write(text)
        o = Overlay(copy, ov.name)
    agent, engine = o.agent_and_engine()
    args = o.rdzvd_args()
    assert str(o.world_of_workload()) == "8" and o.env(agent)["RDZV_WORLD"] == "8"
    assert str(engine["resources"]["limits"]["nvidia.com/gpu"]) == "4"
    assert o.env(engine)["TP"] == "4" and o.env(engine)["PORTS_PER_RANK"] == "16"
    assert (flag_value(args, "--port-base"), flag_value(args, "--port-limit"),
            flag_value(args, "--ports-per-rank")) == ("20000", "30000", "16"), args
    assert o.one("NetworkPolicy", "llm-ranks")["spec"]["ingress"][0]["ports"][0]["port"] == 20000
    assert o.env(agent)["RDZV_GROUP"].startswith("other")
    rdzv_images = [c["image"] for c in o.pod()["initContainers"]] + [o.rdzvd()[1]["image"]]
    assert all(i.endswith(":9.9.9") for i in rdzv_images), rdzv_images


def check_network_policy(ctx, ov):
    s = ov.settings()
    base, limit = int(s["PORT_BASE"]), int(s["PORT_LIMIT"])
    assert limit <= EPHEMERAL[0], "the managed range overlaps the kernel's ephemeral range"
    pol = ov.one("NetworkPolicy", "llm-ranks")
    ranges = [(p["port"], p.get("endPort", p["port"])) for rule in pol["spec"]["ingress"]
              for p in rule.get("ports", [])]
    assert any(lo <= base and hi >= EPHEMERAL[1] for lo, hi in ranges), \
        f"[{base}, {EPHEMERAL[1]}] not open between ranks: {ranges}"
    pod_labels = ov.workload()["metadata"]["labels"]
    assert pol["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    rules = ov.one("NetworkPolicy", "rdzvd")["spec"]["ingress"]
    by_port = {p["port"]: r for r in rules for p in r.get("ports", [])}
    assert bind_port(ov) in by_port, "rdzvd's ZeroMQ port is closed"
    http = by_port.get(http_port(ov))
    assert http and http.get("from"), "rdzvd's HTTP port must not be open to everyone"
    assert all("namespaceSelector" in f and "podSelector" not in f for f in http["from"]), http


def check_no_service_named_like_the_lws(ctx, ov):
    """LWS makes its headless Service only if no Service has its name."""
    names = {s["metadata"]["name"] for s in ov.objects("Service")}
    for lws in ov.objects("LeaderWorkerSet"):
        assert lws["metadata"]["name"] not in names, f"a Service is named {lws['metadata']['name']}"
    assert "llm-api" in names


def check_engine_script_runs(ctx, ov):
    """The engine's script in a real shell, with a stand-in for vllm and a
    real assignment's env file: it waits for the file, passes vllm the
    assignment's numbers, and (StatefulSet) its liveness probe passes until
    the agent's epoch moves on."""
    agent, engine = ov.agent_and_engine()
    sock = flag_value(agent["args"], "--socket")
    rundir = os.path.dirname(sock)
    with tempfile.TemporaryDirectory() as tmp:
        fake = os.path.join(tmp, "bin")
        os.mkdir(fake)
        with open(os.path.join(fake, "vllm"), "w") as f:
            f.write('#!/bin/sh\nprintf "%s\\n" "$@" > "$OUT"\n')
        os.chmod(os.path.join(fake, "vllm"), 0o755)
        run = os.path.join(tmp, "run")
        os.mkdir(run)
        script = script_of(engine).replace(rundir + "/", run + "/")
        env = {k: v for k, v in ov.env(engine).items() if k != "LD_PRELOAD"}
        env.update(PATH=fake + ":/usr/bin:/bin", OUT=os.path.join(tmp, "args"))
        p = subprocess.Popen(["/bin/sh", "-c", script], env=env)
        time.sleep(1.5)
        assert p.poll() is None, "the script did not wait for the env file"
        envfile = os.path.join(run, os.path.basename(sock) + ".env")
        with open(envfile + ".tmp", "w") as f:
            f.write(ctx.env_text)
        os.rename(envfile + ".tmp", envfile)
        assert p.wait(timeout=10) == 0, "the script failed"
        got = open(os.path.join(tmp, "args")).read().split("\n")
        a = {k: "".join(shlex.split(v)) for k, v in
             (line.split("=", 1) for line in ctx.env_text.splitlines() if "=" in line)}
        rpc = int(a["RDZV_PORT_DP_RPC"])
        assert flag_value(got, "--data-parallel-rpc-port") == str(rpc), got
        plan = [int(x) for x in a["RDZV_PORTS"].split(",")]
        assert rpc in plan and rpc != int(a["RDZV_PORT_STORE"]), "the RPC port is not a role's"
        lo, hi = (int(x) for x in a["RDZV_PORT_PROBE"].split("-"))
        assert not lo <= rpc <= hi, "the RPC port is in vLLM's probe pool"
        assert flag_value(got, "--data-parallel-address") == a["RDZV_MASTER_ADDR"], got
        assert flag_value(got, "--data-parallel-rank") == a["RDZV_RANK"], got
        assert flag_value(got, "--data-parallel-size") == a["RDZV_WORLD"], got
        assert flag_value(got, "--tensor-parallel-size") == ov.env(engine)["TP"], got
        assert got[:2] == ["serve", ov.env(engine)["MODEL"]], got
        probe = engine.get("livenessProbe")
        if ov.workload()["kind"] != "StatefulSet":
            assert probe is None, "LWS recreates the group: an epoch probe would only add restarts"
            return "no epoch probe (LWS recreates the group)"
        cmd = [c.replace(rundir + "/", run + "/") for c in probe["exec"]["command"]]

        def live():
            return subprocess.run(cmd, env=env).returncode == 0
        assert live(), "the liveness probe fails in the epoch the engine started in"
        epoch = int(a["RDZV_EPOCH"])
        with open(envfile, "w") as f:
            f.write(ctx.env_text.replace("RDZV_EPOCH=%d" % epoch, "RDZV_EPOCH=%d" % (epoch + 1)))
        assert not live(), "the liveness probe passes after the epoch moved on"
        os.unlink(envfile)
        assert not live(), "the liveness probe passes while the agent withdrew the env file"
    return "liveness follows the epoch"


CHECKS = [v for k, v in list(globals().items()) if k.startswith("check_")]


# --- checks of the HA variants (HA_OVERLAYS) only ---

def selects(selector, labels):
    """Whether a label selector picks Pods with these labels ({} picks all)."""
    if selector is None:
        return False
    assert not selector.get("matchExpressions"), "matchExpressions: not read by this test"
    return selector.get("matchLabels", {}).items() <= labels.items()


def pod_labels(workload):
    return workload["spec"]["template"]["metadata"]["labels"]


def check_spread(workload):
    """A preferred anti-affinity by node among the workload's own Pods."""
    terms = workload["spec"]["template"]["spec"].get("affinity", {}).get("podAntiAffinity", {}) \
        .get("preferredDuringSchedulingIgnoredDuringExecution", [])
    name = workload["metadata"]["name"]
    assert any(t["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname" and
               selects(t["podAffinityTerm"]["labelSelector"], pod_labels(workload))
               for t in terms), f"{name}'s replicas are not spread across nodes"


def url_parts(url):
    u = urllib.parse.urlsplit(url)
    assert u.scheme in ("http", "https") and u.hostname and u.port, f"not a URL with a port: {url}"
    return u.scheme, u.hostname, u.port


def etcd_pod(ov):
    sts = ov.etcd()
    assert sts, f"{ov.name}: no etcd StatefulSet"
    return sts, sts["spec"]["template"]["spec"]["containers"][0]


def member_host(ov):
    """A member's host name: POD.SERVICE, maybe with the namespace after it."""
    sts = ov.etcd()
    return re.compile(r"%s-(\d+)\.%s(?:\.[a-z0-9.-]+)?" % (re.escape(sts["metadata"]["name"]),
                                                        re.escape(sts["spec"]["serviceName"])))


def etcd_member_args(ov, i):
    """Member i's arguments as its Pod gets them: $(VAR) expanded, the
    Pod's name for metadata.name."""
    sts, c = etcd_pod(ov)
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
        else:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            assert path == "metadata.name", f"etcd reads {path}, which this test cannot fill in"
            env[e["name"]] = "%s-%d" % (sts["metadata"]["name"], i)
    return [expand(a, env) for a in c.get("args", [])]


def etcd_cluster(arg):
    """--initial-cluster NAME=URL,... -> {NAME: URL}."""
    return dict(kv.split("=", 1) for kv in arg.split(","))


def probe_port(c, probe):
    return c[probe]["httpGet"]["port"]


def ha_rdzvd_routing(ctx, ov):
    """Only the leader is Ready and so in the rdzvd Service; standbys live,
    name the leader by its own Pod IP, and nothing holds up a drain."""
    dep, c = ov.rdzvd()
    args = ov.rdzvd_args()
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    r = c["readinessProbe"]
    assert r.get("periodSeconds", 10) <= 2 and r.get("failureThreshold", 3) <= 2, \
        f"readiness every {r.get('periodSeconds', 10)} s, {r.get('failureThreshold', 3)} " \
        f"failures: a takeover would wait for it"
    assert c["startupProbe"]["httpGet"]["path"] != "/readyz", \
        "a standby is never Ready: a startup probe on /readyz would kill it"
    svc = ov.one("Service", "rdzvd")
    assert not svc["spec"].get("publishNotReadyAddresses"), "the rdzvd Service would reach standbys"
    assert selects({"matchLabels": svc["spec"]["selector"]}, pod_labels(dep))
    m = re.fullmatch(r"tcp://(.+):(\d+)", flag_value(args, "--advertise") or "")
    assert m, f"--advertise {flag_value(args, '--advertise')}"
    assert m.group(1) == "<fieldRef:status.podIP>", f"--advertise names {m.group(1)}, not the Pod's IP"
    assert int(m.group(2)) == bind_port(ov), "--advertise is not on --bind's port"
    # A budget counts Ready Pods: with one Ready, any budget that protects
    # anything would refuse to evict the leader, and drains would hang.
    for pdb in ov.objects("PodDisruptionBudget"):
        assert not selects(pdb["spec"]["selector"], pod_labels(dep)), \
            f"PodDisruptionBudget {pdb['metadata']['name']} holds rdzvd, of which only one is ever Ready"
    check_spread(dep)


def ha_etcd_members(ctx, ov):
    """etcd's members, their names and URLs one with another, with the
    headless Service, with rdzvd's --etcd; data on claims, probes, budget."""
    sts, c = etcd_pod(ov)
    name, n = sts["metadata"]["name"], sts["spec"]["replicas"]
    assert n >= 3 and n % 2 == 1, f"{n} etcd members"
    assert sts["spec"].get("podManagementPolicy") == "Parallel", \
        "OrderedReady waits for the first member to be Ready, which needs a quorum"
    svc = ov.one("Service", sts["spec"]["serviceName"])
    assert svc["spec"].get("clusterIP") == "None", "the members' Service is not headless"
    assert svc["spec"].get("publishNotReadyAddresses"), "members cannot find each other before a quorum"
    assert selects({"matchLabels": svc["spec"]["selector"]}, pod_labels(sts))
    svc_ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
    cports = {p["name"]: p["containerPort"] for p in c["ports"]}
    host = member_host(ov)
    clients = []
    for i in range(n):
        a = etcd_member_args(ov, i)
        me = "%s-%d" % (name, i)
        assert flag_value(a, "--name") == me, f"member {i} is named {flag_value(a, '--name')}"
        cluster = etcd_cluster(flag_value(a, "--initial-cluster"))
        assert sorted(cluster) == sorted("%s-%d" % (name, j) for j in range(n)), \
            f"--initial-cluster names {sorted(cluster)}"
        peer = flag_value(a, "--initial-advertise-peer-urls")
        assert cluster[me] == peer, f"{me} advertises {peer}, --initial-cluster says {cluster[me]}"
        for member, url in cluster.items():
            _, h, port = url_parts(url)
            m = host.fullmatch(h)
            assert m and "%s-%s" % (name, m.group(1)) == member, f"{member}={url}: not its Pod's name"
            assert port == url_parts(flag_value(a, "--listen-peer-urls"))[2] == svc_ports["peer"] \
                == cports["peer"], f"peer port {port}"
        client = flag_value(a, "--advertise-client-urls")
        _, h, port = url_parts(client)
        assert host.fullmatch(h) and host.fullmatch(h).group(1) == str(i), f"{me} advertises {client}"
        assert port == url_parts(flag_value(a, "--listen-client-urls"))[2] == svc_ports["client"] \
            == cports["client"], f"client port {port}"
        clients.append(client)
    assert flag_value(a, "--initial-cluster-state") == "new"
    etcd_flag = flag_value(ov.rdzvd_args(), "--etcd")
    assert etcd_flag and sorted(etcd_flag.split(",")) == sorted(clients), \
        f"rdzvd --etcd {etcd_flag}, the members advertise {','.join(clients)}"
    data = flag_value(a, "--data-dir")
    claims = [t["metadata"]["name"] for t in sts["spec"].get("volumeClaimTemplates", [])]
    assert volume_at(c, data) in claims, f"--data-dir {data} is not on a claim of each member"
    metrics = url_parts(flag_value(a, "--listen-metrics-urls"))[2]
    assert metrics == cports["metrics"]
    for probe, path in (("startupProbe", "/livez"), ("livenessProbe", "/livez"),
                        ("readinessProbe", "/readyz")):
        assert c[probe]["httpGet"]["path"] == path and probe_port(c, probe) == metrics, \
            f"etcd's {probe} is not {path} on --listen-metrics-urls's port {metrics}"
    m = re.fullmatch(r".*/etcd:v?(\d+)\.(\d+)\.(\d+)(-\d+)?", c["image"])
    assert m, f"etcd image {c['image']} is not pinned to a release"
    assert tuple(int(x) for x in m.groups()[:3]) >= ETCD_MIN_VERSION, \
        f"{c['image']} predates /livez and /readyz"
    pdbs = [p for p in ov.objects("PodDisruptionBudget") if selects(p["spec"]["selector"], pod_labels(sts))]
    assert len(pdbs) == 1 and pdbs[0]["spec"].get("minAvailable") == n // 2 + 1, \
        f"etcd's budget {[p['spec'] for p in pdbs]}, not minAvailable {n // 2 + 1} (a quorum)"
    check_spread(sts)
    if not ctx.etcd:
        return "etcd not installed: flags not checked"
    for flag in flags_in(a):
        assert flag in ctx.etcd_help, \
            "etcd %s --help has no %s" % (".".join(map(str, ctx.etcd_version or ())), flag)
    return "flags as etcd %s knows them" % ".".join(map(str, ctx.etcd_version or ()))


def ha_etcd_network_policy(ctx, ov):
    """etcd's client port for rdzvd alone, its peer port for its members,
    metrics for the monitoring namespace; nothing open to all."""
    sts, c = etcd_pod(ov)
    dep, _ = ov.rdzvd()
    pols = [p for p in ov.objects("NetworkPolicy") if selects(p["spec"]["podSelector"], pod_labels(sts))]
    assert len(pols) == 1, f"{len(pols)} NetworkPolicies hold the etcd Pods"
    spec = pols[0]["spec"]
    assert "Ingress" in spec["policyTypes"]
    cports = {p["name"]: p["containerPort"] for p in c["ports"]}
    by_port = {}
    for rule in spec["ingress"]:
        assert rule.get("from"), "a rule open to every Pod and namespace"
        assert rule.get("ports"), "a rule open on every port"
        for p in rule["ports"]:
            assert "endPort" not in p
            by_port.setdefault(p["port"], []).extend(rule["from"])
    assert set(by_port) == set(cports.values()), f"ports {sorted(by_port)}, etcd's {sorted(cports.values())}"

    def only_pods(port, labels, who):
        for f in by_port[port]:
            assert set(f) == {"podSelector"} and f["podSelector"].get("matchLabels") and \
                selects(f["podSelector"], labels), \
                f"port {port} is open to {f}, not only {who}"
    only_pods(cports["client"], pod_labels(dep), "rdzvd")
    only_pods(cports["peer"], pod_labels(sts), "etcd's members")
    assert all(set(f) == {"namespaceSelector"} for f in by_port[cports["metrics"]]), \
        by_port[cports["metrics"]]
    # The ranks are not let in by some broader rule either.
    assert not any(selects(f.get("podSelector"), pod_labels(ov.workload()))
                   for fs in by_port.values() for f in fs), "the ranks reach etcd"


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def http_status(url, token=None):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None


def wait_for(what, pred, timeout):
    deadline = time.time() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.time() > deadline:
            raise AssertionError("%s within %d s" % (what, timeout))
        time.sleep(0.1)


def local_paths(container, args, dirs):
    """Paths under a volume's mount moved to dirs[volume]."""
    out = []
    for a in args:
        vol = volume_at(container, a) if a.startswith("/") else None
        if vol in dirs:
            a = dirs[vol] + a[len(mount_dir(container, vol).rstrip("/")):]
        out.append(a)
    return out


def ha_failover_runs(ctx, ov):
    """The variant run on loopback with its own arguments: the etcd members
    (each Pod's name and port given its own 127.0.0.1 port) form a cluster;
    the rdzvd replicas, with make-secrets.sh's keys, elect one leader, the
    only one ready, all healthy; a group joined there outlives it: stopped,
    another replica takes over and knows the group."""
    if not ctx.etcd:
        raise Skip("etcd is not installed")
    if "--etcd" not in ctx.rdzvd_help:
        raise Skip("this rdzvd was built without --etcd (libcurl)")
    sts, ec = etcd_pod(ov)
    n = sts["spec"]["replicas"]
    host = member_host(ov)
    members = [etcd_member_args(ov, i) for i in range(n)]
    ports = sorted({url_parts(u)[2] for a in members for u in re.findall(r"https?://[^,=\s]+", " ".join(a))})
    local = dict(zip([(i, p) for i in range(n) for p in ports], free_ports(n * len(ports))))

    def localize(i, arg):
        """Member i's listen URLs and every member's name to 127.0.0.1."""
        def one(m):
            scheme, h, port = url_parts(m.group(0))
            named = host.fullmatch(h)
            if named:
                j = int(named.group(1))
            else:
                assert h in ("0.0.0.0", "::") and i is not None, f"{m.group(0)}: not a member's name"
                j = i
            return "%s://127.0.0.1:%d" % (scheme, local[(j, port)])
        return re.sub(r"https?://[^,=\s]+", one, arg)

    dep, c = ov.rdzvd()
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        def start(argv, log):
            f = open(os.path.join(tmp, log), "w")
            procs.append((subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT), f, log))
            return procs[-1][0]
        try:
            vol = volume_at(ec, flag_value(members[0], "--data-dir"))
            for i, a in enumerate(members):
                d = os.path.join(tmp, "etcd-%d" % i)
                os.mkdir(d)
                start([ctx.etcd] + [localize(i, x) for x in local_paths(ec, a, {vol: d})], "etcd-%d.log" % i)
            metrics = url_parts(flag_value(members[0], "--listen-metrics-urls"))[2]
            paths = [ec[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")] \
                if ctx.etcd_version and ctx.etcd_version >= ETCD_MIN_VERSION else ["/health"]

            def answers(url):
                for p, _, log in procs:
                    assert p.poll() is None, "%s exited (status %s)" % (log[:-4], p.returncode)
                return http_status(url) == 200
            for i in range(n):
                for path in paths:
                    url = "http://127.0.0.1:%d%s" % (local[(i, metrics)], path)
                    wait_for(f"etcd member {i} answers {path}", lambda: answers(url), 30)

            secrets = {}
            for d in ctx.print_secrets():
                secrets[d["metadata"]["name"]] = os.path.join(tmp, d["metadata"]["name"])
                os.mkdir(secrets[d["metadata"]["name"]])
                for key, value in d["data"].items():
                    with open(os.path.join(secrets[d["metadata"]["name"]], key), "wb") as f:
                        f.write(base64.b64decode(value))
            dirs = {v["name"]: secrets[v["secret"]["secretName"]]
                    for v in dep["spec"]["template"]["spec"]["volumes"] if "secret" in v}
            env = ov.env(c)
            env = {k: ("127.0.0.1" if v == "<fieldRef:status.podIP>" else v) for k, v in env.items()}
            base_args = [expand(a, env) for a in c["args"]]
            http_p = http_port(ov)
            replicas = []
            for k in range(dep["spec"]["replicas"]):
                zmq, http = free_ports(2)
                a = [re.sub(r"^tcp://[^/]+:%d$" % bind_port(ov), "tcp://127.0.0.1:%d" % zmq, x)
                     for x in base_args]
                a = [re.sub(r"^(0\.0\.0\.0|\[::\]):%d$" % http_p, "127.0.0.1:%d" % http, x) for x in a]
                etcd_i = a.index("--etcd") + 1
                a[etcd_i] = localize(None, a[etcd_i])
                a = local_paths(c, a, dirs)
                assert flag_value(a, "--advertise") == "tcp://127.0.0.1:%d" % zmq, a
                p = start([ctx.rdzvd] + a, "rdzvd-%d.log" % k)
                replicas.append((p, zmq, "http://127.0.0.1:%d" % http))

            def leaders(rs):
                for p, _, _ in rs:
                    assert p.poll() is None, "an rdzvd exited (status %s)" % p.returncode
                if not all(http_status(h + "/healthz") == 200 for _, _, h in rs):
                    return None
                ready = [r for r in rs if http_status(r[2] + "/readyz") == 200]
                return ready if len(ready) == 1 else None
            t0 = time.time()
            leader = wait_for("every rdzvd healthy and exactly one ready", lambda: leaders(replicas), 30)[0]
            first = time.time() - t0
            token = open(os.path.join(dirs[volume_at(c, flag_value(base_args, "--http-token"))],
                                      os.path.basename(flag_value(base_args, "--http-token")))).read().strip()
            client = secrets["rdzv-client-curve"]
            jenv = dict(os.environ, RDZV_CURVE_SERVER_PUBLIC=os.path.join(client, "server.key"),
                        RDZV_CURVE_SECRET=os.path.join(client, "client.key_secret"),
                        RDZV_GROUP_TOKEN=os.path.join(secrets["rdzv-group-token"], "token"))
            j = subprocess.run([ctx.rdzv, "join", "--server", "tcp://127.0.0.1:%d" % leader[1],
                                "--group", "ha", "--world", "1", "--rank", "0", "--timeout", "10"],
                               env=jenv, capture_output=True, text=True, timeout=30)
            assert j.returncode == 0, "join at the leader: " + j.stderr
            assert http_status(leader[2] + "/v1/groups/ha", token) == 200
            leader[0].send_signal(signal.SIGTERM)
            leader[0].wait(timeout=15)
            rest = [r for r in replicas if r is not leader]
            t0 = time.time()
            new = wait_for("a standby takes over", lambda: leaders(rest), 20)[0]
            took = time.time() - t0
            assert http_status(new[2] + "/v1/groups/ha", token) == 200, "the new leader lost the group"
            return "%d members, leader in %.1f s, takeover in %.1f s" % (n, first, took)
        except AssertionError as e:
            logs = "".join("\n--- %s\n%s" % (log, "".join(open(os.path.join(tmp, log)).readlines()[-8:]))
                           for _, _, log in procs)
            raise AssertionError(str(e) + logs) from None
        finally:
            # rdzvd first: a replica that stops gives up its lease in etcd.
            for p, f, _ in reversed(procs):
                if p.poll() is None:
                    p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                f.close()


HA_CHECKS = [ha_rdzvd_routing, ha_etcd_members, ha_etcd_network_policy, ha_failover_runs]


def check_readme_versions(ctx):
    with open(os.path.join(ctx.kdir, "README.md")) as f:
        head = f.read()[:3000]
    for want in ("Kubernetes 1.29", "LeaderWorkerSet v0.6", "kubectl 1.27"):
        assert want in head, f"examples/kubernetes/README.md does not state {want!r} at the top"


def bare_path(tmp):
    """A PATH with what make-secrets.sh runs but no kubectl, as in the image."""
    d = os.path.join(tmp, "bin")
    os.mkdir(d)
    for tool in ("sh", "mktemp", "head", "od", "tr", "base64", "basename", "dirname", "rm",
                 "sed", "cat", "printf"):
        os.symlink(shutil.which(tool), os.path.join(d, tool))
    return d


def check_secrets_print_without_kubectl(ctx):
    """--print as from the image: no kubectl, the same five Secrets, and valid objects."""
    with tempfile.TemporaryDirectory() as tmp:
        docs = ctx.print_secrets(bare_path(tmp))
    made = {d["metadata"]["name"]: set(d["data"]) for d in docs}
    assert made == ctx.secrets, f"without kubectl: {made}, with: {ctx.secrets}"
    k8s = os.path.join(ctx.root, "tests", "ops", "k8s")
    if os.path.isdir(os.path.join(k8s, "node_modules")):
        p = subprocess.run(["node", os.path.join(k8s, "validate.mjs")], input=yaml.safe_dump_all(docs),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr


def check_secrets_work_together(ctx):
    """The printed keys and token as the manifests mount them: a real rdzvd
    with them admits a join with the client's keys and refuses another key."""
    import base64
    docs = {d["metadata"]["name"]: d["data"] for d in ctx.print_secrets()}
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in docs.items():
            os.mkdir(os.path.join(tmp, name))
            for key, value in data.items():
                with open(os.path.join(tmp, name, key), "wb") as f:
                    f.write(base64.b64decode(value))
        epfile = os.path.join(tmp, "endpoint")
        proc = subprocess.Popen([ctx.rdzvd, "--bind", "tcp://127.0.0.1:*", "--endpoint-file", epfile,
                                 "--state-dir", os.path.join(tmp, "state"), "--no-nccl",
                                 "--curve-secret", os.path.join(tmp, "rdzv-server-curve", "server.key_secret"),
                                 "--clients", os.path.join(tmp, "rdzv-clients"),
                                 "--group-token", os.path.join(tmp, "rdzv-group-token", "token")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 20
            while not os.path.exists(epfile) and time.time() < deadline:
                time.sleep(0.05)
            endpoint = open(epfile).read().strip()
            subprocess.run([ctx.rdzv, "keygen", os.path.join(tmp, "stranger.key")], check=True,
                           capture_output=True)

            def join(secret):
                env = dict(os.environ,
                           RDZV_CURVE_SERVER_PUBLIC=os.path.join(tmp, "rdzv-client-curve", "server.key"),
                           RDZV_CURVE_SECRET=secret,
                           RDZV_GROUP_TOKEN=os.path.join(tmp, "rdzv-group-token", "token"))
                return subprocess.run([ctx.rdzv, "join", "--server", endpoint, "--group", "s",
                                       "--world", "1", "--rank", "0", "--timeout", "3"],
                                      env=env, capture_output=True, text=True, timeout=30)
            ok = join(os.path.join(tmp, "rdzv-client-curve", "client.key_secret"))
            assert ok.returncode == 0, "the client's keys were refused: " + ok.stderr
            bad = join(os.path.join(tmp, "stranger.key_secret"))
            assert bad.returncode != 0, "a key rdzvd does not list was admitted"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


# A stand-in for the API server's part of kubectl (there is no cluster
# here): `get secret NAME` and `apply -f FILE` on a directory, one file per
# Secret; anything else goes to the real kubectl (create --dry-run=client).
KUBECTL_STANDIN = """#!/bin/sh
store=$STORE
while [ "${1:-}" = -n ]; do shift 2; done
case "$1 $2" in
"get secret") test -f "$store/$3"; exit ;;
"apply -f")
    python3 - "$store" "$3" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[2])):
    if d:
        open("%s/%s" % (sys.argv[1], d["metadata"]["name"]), "w").write(yaml.safe_dump(d))
        print("secret/%s configured" % d["metadata"]["name"])
PY
    exit ;;
esac
exec "$REAL_KUBECTL" "$@"
"""


def check_secrets_apply_idempotent(ctx):
    """Run twice, nothing changes; one key Secret lost, a fresh set of the
    four keys (the HTTP token kept); the HTTP token lost, only it made anew;
    --rotate, a fresh set of all five."""
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        os.mkdir(store)
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        with open(os.path.join(bindir, "kubectl"), "w") as f:
            f.write(KUBECTL_STANDIN)
        os.chmod(os.path.join(bindir, "kubectl"), 0o755)
        env = dict(os.environ, RDZV=ctx.rdzv, STORE=store, REAL_KUBECTL=shutil.which("kubectl"),
                   PATH=bindir + ":" + os.environ["PATH"])

        def run(*args):
            p = subprocess.run(["/bin/sh", os.path.join(ctx.kdir, "make-secrets.sh"), *args, "-n", "llm"],
                               env=env, capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stderr
            return {n: open(os.path.join(store, n)).read() for n in sorted(os.listdir(store))}
        first = run()
        assert set(first) == set(ctx.secrets), sorted(first)
        assert run() == first, "a second run changed the Secrets"
        os.unlink(os.path.join(store, "rdzv-clients"))
        third = run()
        keys = [n for n in first if n != "rdzv-http-token"]
        assert set(third) == set(first) and all(third[n] != first[n] for n in keys), \
            "a partial set of keys was not replaced whole"
        assert third["rdzv-http-token"] == first["rdzv-http-token"], "the HTTP token changed with the keys"
        os.unlink(os.path.join(store, "rdzv-http-token"))
        fourth = run()
        assert all(fourth[n] == third[n] for n in keys), "a lost HTTP token changed the keys"
        assert fourth["rdzv-http-token"] != third["rdzv-http-token"], "the HTTP token was not made anew"
        fifth = run("--rotate")
        assert all(fifth[n] != fourth[n] for n in fourth), "--rotate kept a Secret"


GLOBAL_CHECKS = [check_readme_versions, check_secrets_print_without_kubectl,
                 check_secrets_work_together, check_secrets_apply_idempotent]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--rdzv", required=True)
    ap.add_argument("--rdzvd", required=True)
    opts = ap.parse_args()
    try:
        ctx = Context(opts.source_root, opts.rdzv, opts.rdzvd)
    except Skip as e:
        print("1..0 # SKIP %s" % e)
        return 0
    runs = [(ov.name + " " + c.__name__.split("_", 1)[1], lambda c=c, ov=ov: c(ctx, ov))
            for ov in ctx.overlays for c in CHECKS + (HA_CHECKS if ov.name in HA_OVERLAYS else [])]
    runs += [(c.__name__[len("check_"):], lambda c=c: c(ctx)) for c in GLOBAL_CHECKS]
    print("1..%d" % len(runs))
    failed = 0
    n = 0
    for name, run in runs:
        n += 1
        try:
            note = run()
            print("ok %d - %s%s" % (n, name, " (%s)" % note if note else ""))
        except Skip as e:
            print("ok %d - %s # SKIP %s" % (n, name, e))
        except (AssertionError, KeyError, TypeError, ValueError, AttributeError, IndexError,
                subprocess.SubprocessError) as e:
            failed += 1
            print("not ok %d - %s" % (n, name))
            print("# %s: %s" % (type(e).__name__, str(e).replace("\n", "\n# ")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
