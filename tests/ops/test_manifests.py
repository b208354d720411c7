#!/usr/bin/env python3
"""Loads every manifest of examples/kubernetes and checks the wiring against
the binaries: the agent's socket path, the flags and variables rdzvd and rdzv
accept, the names the assignment's env file really has (from a real rdzvd on
loopback), ports and ranges, native-sidecar ordering, images and probes.
Prints TAP."""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

import yaml

ENGINE_FLAGS = ["--data-parallel-size", "--data-parallel-rank", "--data-parallel-address",
                "--data-parallel-rpc-port", "--tensor-parallel-size", "--enable-expert-parallel"]
# Variables Kubernetes or LWS put in a container, not ours to check.
FOREIGN_VARS = {"LWS_WORKER_INDEX", "LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "HOME", "PATH"}


def docs_of(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


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


def env_value(container, name):
    e = env_of(container).get(name)
    return None if e is None else e.get("value")


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


class Context:
    def __init__(self, root, rdzv, rdzvd):
        self.root = root
        self.kdir = os.path.join(root, "examples", "kubernetes")
        self.rdzv = rdzv
        self.rdzvd = rdzvd
        self.files = sorted(f for f in os.listdir(self.kdir) if f.endswith((".yaml", ".yml")))
        self.docs = {f: docs_of(os.path.join(self.kdir, f)) for f in self.files}
        self.rdzvd_help = subprocess.run([rdzvd, "--help"], capture_output=True, text=True).stdout
        self.agent_help = subprocess.run([rdzv, "agent", "--help"], capture_output=True,
                                         text=True).stdout
        self.binary_strings = self._strings()
        self.env_names = self._assignment_env_names()
        self.secrets = self._secrets_made()

    def objects(self, kind):
        return [(f, d) for f in self.files for d in self.docs[f] if d.get("kind") == kind]

    def one(self, kind, name):
        found = [d for _, d in self.objects(kind) if d["metadata"]["name"] == name]
        assert len(found) == 1, f"want one {kind} {name}, found {len(found)}"
        return found[0]

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

    def _assignment_env_names(self):
        """KEY names of a real `rdzv join --format env` against a real rdzvd."""
        with tempfile.TemporaryDirectory() as tmp:
            epfile = os.path.join(tmp, "endpoint")
            proc = subprocess.Popen([self.rdzvd, "--bind", "tcp://127.0.0.1:*", "--endpoint-file",
                                     epfile, "--state-dir", os.path.join(tmp, "state"), "--no-nccl"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                deadline = time.time() + 20
                while not os.path.exists(epfile) and time.time() < deadline:
                    time.sleep(0.05)
                with open(epfile) as f:
                    endpoint = f.read().strip()
                out = subprocess.run([self.rdzv, "join", "--server", endpoint, "--group", "m",
                                      "--world", "1", "--rank", "0", "--format", "env",
                                      "--timeout", "20"],
                                     capture_output=True, text=True, timeout=30, check=True).stdout
            finally:
                proc.terminate()
                proc.wait(timeout=10)
        return {line.split("=", 1)[0] for line in out.splitlines() if "=" in line}

    def _secrets_made(self):
        """Secret name -> file keys, as make-secrets.sh creates them."""
        with open(os.path.join(self.kdir, "make-secrets.sh")) as f:
            text = f.read().replace("\\\n", " ")
        made = {}
        for m in re.finditer(r"create secret generic (\S+)((?:\s+--from-file=\S+)+)", text):
            made[m.group(1)] = {os.path.basename(p.strip('"'))
                                for p in re.findall(r"--from-file=(\S+)", m.group(2))}
        return made


def rdzvd_container(ctx):
    dep = ctx.one("Deployment", "rdzvd")
    return dep, dep["spec"]["template"]["spec"]["containers"][0]


def rdzvd_args(ctx):
    return rdzvd_container(ctx)[1]["args"]


def http_port(ctx):
    value = flag_value(rdzvd_args(ctx), "--http")
    assert value, "rdzvd has no --http"
    return int(value.rsplit(":", 1)[-1])


def managed_range(ctx):
    args = rdzvd_args(ctx)
    return int(flag_value(args, "--port-base")), int(flag_value(args, "--port-limit"))


def rank_workloads(ctx):
    """(label, pod spec, world, replicas-or-size, kind) of every rank workload."""
    out = []
    for f, d in ctx.objects("StatefulSet"):
        out.append((f"{f}:StatefulSet/{d['metadata']['name']}", d["spec"]["template"]["spec"],
                    d["spec"]["replicas"], d))
    for f, d in ctx.objects("LeaderWorkerSet"):
        t = d["spec"]["leaderWorkerTemplate"]
        out.append((f"{f}:LeaderWorkerSet/{d['metadata']['name']}", t["workerTemplate"]["spec"],
                    t["size"], d))
    assert out, "no rank workload"
    return out


def agent_and_engine(pod):
    agents = [c for c in pod.get("initContainers", []) if (c.get("args") or [None])[0] == "agent"]
    assert len(agents) == 1, "want exactly one `rdzv agent` init container"
    engines = [c for c in pod["containers"] if "vllm serve" in script_of(c)]
    assert len(engines) == 1, "want exactly one container running vllm serve"
    return agents[0], engines[0]


# --- checks ---

def check_every_manifest_loads(ctx):
    assert ctx.files, "no manifests"
    for f in ctx.files:
        for d in ctx.docs[f]:
            if d.get("kind") == "Kustomization":
                for r in d["resources"]:
                    assert os.path.exists(os.path.join(ctx.kdir, r)), f"{f}: missing {r}"
                continue
            for key in ("apiVersion", "kind", "metadata"):
                assert key in d, f"{f}: a document lacks {key}"
            assert d["metadata"].get("name"), f"{f}: a {d['kind']} has no name"


def check_rdzvd_deployment(ctx):
    dep, c = rdzvd_container(ctx)
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"]["type"] == "Recreate", "a rolling update would run two rdzvd"
    state = flag_value(c["args"], "--state-dir")
    vol = volume_at(c, state)
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    claim = vols[vol]["persistentVolumeClaim"]["claimName"]
    ctx.one("PersistentVolumeClaim", claim)
    for flag in flags_in(c["args"]):
        assert flag in ctx.rdzvd_help, f"rdzvd --help has no {flag}"


def check_rdzvd_probes_and_metrics_port(ctx):
    dep, c = rdzvd_container(ctx)
    port = http_port(ctx)
    host = flag_value(c["args"], "--http").rsplit(":", 1)[0]
    assert host in ("0.0.0.0", "[::]"), "probes come from the kubelet: --http must not be loopback"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"]["port"] == port, f"{probe} is not on --http's port {port}"
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert int(ann["prometheus.io/port"]) == port
    assert ann["prometheus.io/path"] == "/metrics"
    assert port in [p["containerPort"] for p in c["ports"]]


def check_rdzvd_service(ctx):
    svc = ctx.one("Service", "rdzvd")
    bind_port = int(flag_value(rdzvd_args(ctx), "--bind").rsplit(":", 1)[-1])
    ports = [p["port"] for p in svc["spec"]["ports"]]
    assert bind_port in ports and http_port(ctx) in ports, ports


def check_rdzvd_secrets(ctx):
    dep, c = rdzvd_container(ctx)
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    for flag in ("--curve-secret", "--clients", "--group-token"):
        path = flag_value(c["args"], flag)
        assert path, f"rdzvd lacks {flag}"
        vol = vols[volume_at(c, path)]
        secret = vol["secret"]["secretName"]
        assert secret in ctx.secrets, f"make-secrets.sh does not make {secret}"
        if flag != "--clients":
            assert os.path.basename(path) in ctx.secrets[secret], f"{secret} has no {path}"


def check_native_sidecar(ctx):
    for label, pod, _, _ in rank_workloads(ctx):
        agent, engine = agent_and_engine(pod)
        assert agent.get("restartPolicy") == "Always", f"{label}: agent is not a native sidecar"
        names = [c["name"] for c in pod["initContainers"]]
        for c in pod["initContainers"]:
            if c.get("restartPolicy") != "Always":
                # A run-to-completion init container after the sidecar would
                # wait for the assignment; before it, it must not need it.
                assert names.index(c["name"]) < names.index(agent["name"]), \
                    f"{label}: {c['name']} runs after the agent sidecar"
        probe = agent["startupProbe"]["exec"]["command"]
        sock = flag_value(agent["args"], "--socket")
        assert probe == ["test", "-S", sock], f"{label}: startup probe {probe} is not on {sock}"


def check_socket_path_everywhere(ctx):
    for label, pod, _, _ in rank_workloads(ctx):
        agent, engine = agent_and_engine(pod)
        sock = flag_value(agent["args"], "--socket")
        assert env_value(engine, "RDZV_AGENT_SOCKET") == sock, label
        words = script_words(script_of(engine))
        sourced = [words[i + 1] for i, w in enumerate(words) if w in (".", "source")]
        assert sourced == [sock + ".env"], f"{label}: the engine sources {sourced}"
        shared = volume_at(agent, sock)
        assert shared and volume_at(engine, sock) == shared, f"{label}: socket dir not shared"
        assert mount_dir(agent, shared) == mount_dir(engine, shared) == os.path.dirname(sock)
        vols = {v["name"]: v for v in pod["volumes"]}
        assert "emptyDir" in vols[shared], f"{label}: {shared} is not an emptyDir"


def check_agent_flags_and_variables(ctx):
    for label, pod, _, _ in rank_workloads(ctx):
        agent, _ = agent_and_engine(pod)
        for flag in flags_in(agent["args"]):
            assert flag in ctx.agent_help, f"{label}: rdzv agent --help has no {flag}"
        for name in env_of(agent):
            if name.startswith("RDZV_"):
                assert name in ctx.binary_strings, f"{label}: no binary reads {name}"
        for name in ("RDZV_SERVER", "RDZV_GROUP", "RDZV_WORLD", "RDZV_RANK"):
            assert name in env_of(agent), f"{label}: agent lacks {name}"


def check_agent_reaches_rdzvd(ctx):
    svc = ctx.one("Service", "rdzvd")
    for label, pod, _, _ in rank_workloads(ctx):
        agent, _ = agent_and_engine(pod)
        m = re.fullmatch(r"tcp://([^:]+):(\d+)", env_value(agent, "RDZV_SERVER"))
        assert m and m.group(1).split(".")[0] == svc["metadata"]["name"], label
        assert int(m.group(2)) in [p["port"] for p in svc["spec"]["ports"]], label


def check_agent_secrets(ctx):
    for label, pod, _, _ in rank_workloads(ctx):
        agent, engine = agent_and_engine(pod)
        vols = {v["name"]: v for v in pod["volumes"]}
        for name in ("RDZV_CURVE_SERVER_PUBLIC", "RDZV_CURVE_SECRET", "RDZV_GROUP_TOKEN"):
            path = env_value(agent, name)
            assert path, f"{label}: agent lacks {name}"
            vol = volume_at(agent, path)
            secret = vols[vol]["secret"]["secretName"]
            assert os.path.basename(path) in ctx.secrets.get(secret, ()), \
                f"{label}: {name}={path} is not a key of Secret {secret}"
            assert volume_at(engine, path) is None, f"{label}: the engine mounts {secret}"


def check_uids(ctx):
    for label, pod, _, _ in rank_workloads(ctx):
        agent, engine = agent_and_engine(pod)
        a_uid = agent["securityContext"]["runAsUser"]
        e_uid = engine["securityContext"]["runAsUser"]
        assert a_uid != e_uid, f"{label}: agent and engine share uid {a_uid}"
        allowed = [int(agent["args"][i + 1]) for i, a in enumerate(agent["args"])
                   if a == "--allow-uid"]
        assert allowed == [e_uid], f"{label}: --allow-uid {allowed}, engine uid {e_uid}"


def check_engine_command(ctx):
    for label, pod, world, _ in rank_workloads(ctx):
        _, engine = agent_and_engine(pod)
        words = script_words(script_of(engine))
        for flag in ENGINE_FLAGS:
            assert flag in words, f"{label}: vllm serve lacks {flag}"
        assert flag_value(words, "--tensor-parallel-size") == "2"
        dp = flag_value(words, "--data-parallel-size")
        assert dp in (str(world), "$LWS_GROUP_SIZE"), f"{label}: DP size {dp}, {world} ranks"
        assert flag_value(words, "--data-parallel-rank") == "$RDZV_RANK"
        assert engine["resources"]["limits"]["nvidia.com/gpu"] == 2
        preload = env_value(engine, "LD_PRELOAD")
        assert preload.endswith("/librdzv_shim.so"), preload
        shim_vol = volume_at(engine, preload)
        writers = [c for c in pod["initContainers"] if mount_dir(c, shim_vol)]
        assert writers, f"{label}: nothing puts the shim in {shim_vol}"


def check_engine_variables_exist(ctx):
    """Every $VAR the engine's script reads is set by someone."""
    for label, pod, _, _ in rank_workloads(ctx):
        _, engine = agent_and_engine(pod)
        used = set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", script_of(engine)))
        known = ctx.env_names | set(env_of(engine)) | FOREIGN_VARS
        missing = used - known
        assert not missing, f"{label}: nobody sets {sorted(missing)}"
        for name in ("VLLM_PORT", "RDZV_RANK", "RDZV_MASTER_ADDR", "RDZV_MASTER_PORT"):
            assert name in ctx.env_names, f"the env file has no {name}"


def check_ranges_agree(ctx):
    base, limit = managed_range(ctx)
    per_rank = int(flag_value(rdzvd_args(ctx), "--ports-per-rank"))
    want = f"{base}-{limit}"
    for label, pod, _, _ in rank_workloads(ctx):
        agent, engine = agent_and_engine(pod)
        assert flag_value(agent["args"], "--port-range") == want, label
        assert env_value(engine, "RDZV_PORT_RANGE") == want, label
        offset = int(env_value(engine, "DP_RPC_PORT_OFFSET"))
        assert 0 < offset < per_rank, f"{label}: the RPC port is outside rank 0's plan"


def check_images_and_probes(ctx):
    for label, pod, _, _ in rank_workloads(ctx):
        for c in pod.get("initContainers", []) + pod["containers"]:
            assert re.fullmatch(r"\S+:\S+", c.get("image", "")), f"{label}: {c['name']} image"
        _, engine = agent_and_engine(pod)
        assert engine["readinessProbe"]["httpGet"]["path"] == "/health"
        assert engine["startupProbe"]
    dep, c = rdzvd_container(ctx)
    assert re.fullmatch(r"\S+:\S+", c["image"])


def check_all_ranks_start_together(ctx):
    for label, pod, world, obj in rank_workloads(ctx):
        agent, _ = agent_and_engine(pod)
        if obj["kind"] == "StatefulSet":
            assert obj["spec"]["podManagementPolicy"] == "Parallel", label
            assert env_value(agent, "RDZV_WORLD") == str(world), label
            rank = env_of(agent)["RDZV_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
            assert rank == "metadata.labels['apps.kubernetes.io/pod-index']", label
        else:
            assert obj["spec"].get("startupPolicy", "LeaderCreated") == "LeaderCreated", label
            assert env_value(agent, "RDZV_RANK") == "$(LWS_WORKER_INDEX)", label
            assert env_value(agent, "RDZV_WORLD") == "$(LWS_GROUP_SIZE)", label
            assert "$LWS_LEADER_ADDRESS" in script_of(agent_and_engine(pod)[1]), label


def check_network_policy(ctx):
    base, limit = managed_range(ctx)
    pol = ctx.one("NetworkPolicy", "llm-ranks")
    ranges = [(p["port"], p.get("endPort", p["port"])) for rule in pol["spec"]["ingress"]
              for p in rule.get("ports", [])]
    assert (base, limit - 1) in ranges, f"managed range [{base}, {limit}) not open: {ranges}"
    bind_port = int(flag_value(rdzvd_args(ctx), "--bind").rsplit(":", 1)[-1])
    pol = ctx.one("NetworkPolicy", "rdzvd")
    open_ports = [p["port"] for rule in pol["spec"]["ingress"] for p in rule.get("ports", [])]
    assert bind_port in open_ports and http_port(ctx) in open_ports, open_ports


CHECKS = [v for k, v in list(globals().items()) if k.startswith("check_")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--rdzv", required=True)
    ap.add_argument("--rdzvd", required=True)
    opts = ap.parse_args()
    ctx = Context(opts.source_root, opts.rdzv, opts.rdzvd)
    print(f"1..{len(CHECKS)}")
    failed = 0
    for i, check in enumerate(CHECKS, 1):
        name = check.__name__[len("check_"):]
        try:
            check(ctx)
            print(f"ok {i} - {name}")
        except (AssertionError, KeyError, TypeError, ValueError, AttributeError) as e:
            failed += 1
            print(f"not ok {i} - {name}")
            print(f"# {type(e).__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
