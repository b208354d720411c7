#!/usr/bin/env python3
"""The Kubernetes example as a user applies it: each overlay of
examples/kubernetes rendered with `kubectl kustomize` (manifests.py), every
object checked against the official Kubernetes schemas
(tests/ops/k8s/validate.mjs, LeaderWorkerSets against their CRD's
structure), and the wiring checked against the built rdzv and rdzvd and a
real rdzvd on loopback: flags, variables, the assignment's env file, ports,
native-sidecar order, probes, settings made once. The engine's start script
and liveness probe run in a real shell with a stand-in for vllm. The HA
variant's etcd is test_manifests_ha.py's, make-secrets.sh is
test_make_secrets.py's. One line per check and overlay (rdzvtest).

    test_manifests.py --source-root DIR --rdzv EXE --rdzvd EXE"""
import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import urllib.error
import urllib.request

import yaml

import manifests
from manifests import (HA_OVERLAYS, Overlay, bind_port, env_of, flag_value, flags_in, http_port,
                       mount_dir, render_with, script_of, script_words, volume_at)
import rdzvtest
from rdzvtest import Skip

# rdzvd's flags of the HA mode, which a build without libcurl lacks.
HA_RDZVD_FLAGS = {"--etcd", "--etcd-prefix", "--etcd-ca", "--etcd-cert", "--etcd-key",
                  "--etcd-lease", "--advertise"}
MAX_INT32 = 2 ** 31 - 1            # progressDeadlineSeconds: no deadline
# The data-parallel flags come from the assignment's RDZV_VLLM_ARGS
# (check_engine_script_runs expands them); the rest are the example's.
ENGINE_FLAGS = ["$RDZV_VLLM_ARGS", "--tensor-parallel-size", "$ENGINE_ARGS"]
SHELL_VARS = {"HOME", "PATH"}
EPHEMERAL = (32768, 60999)          # the kernel's default ip_local_port_range


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


def check_rdzvd_probes_and_metrics_port(ctx, ov):
    dep, c = ov.rdzvd()
    port = http_port(ov)
    host = flag_value(ov.rdzvd_args(), "--http").rsplit(":", 1)[0]
    assert host in ("0.0.0.0", "[::]"), "probes come from the kubelet: --http must not be loopback"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"]["port"] == port, f"{probe} is not on --http's port {port}"
    # A prometheus.io/scrape annotation sends no token: with --http-token
    # such a scrape only ever gets 401 (../monitoring has the PodMonitor).
    ann = dep["spec"]["template"]["metadata"].get("annotations", {})
    if flag_value(ov.rdzvd_args(), "--http-token"):
        assert not [a for a in ann if a.startswith("prometheus.io/")], \
            f"{sorted(ann)}: an annotation scrape cannot send --http-token's bearer token"
    assert port in [p["containerPort"] for p in c["ports"]]


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
    args = ov.args(agent)
    allowed = [int(args[i + 1]) for i, a in enumerate(args) if a == "--allow-uid"]
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


def check_engine_api_port(ctx, ov):
    """vLLM serves on the api named port RDZV_VLLM_ARGS gives it (--port,
    PORT_BASE + 2 with one rank per Pod): no --port of the script's own may
    win over it, and the container port, the probes and the Services are
    that port."""
    _, engine = ov.agent_and_engine()
    words = script_words(script_of(engine))
    assert "--port" not in words, "the engine's script sets --port beside RDZV_VLLM_ARGS"
    api = int(ov.settings()["PORT_BASE"]) + 2
    ports = {p["name"]: p["containerPort"] for p in engine["ports"]}
    assert ports.get("api") == api, f"the engine's api container port {ports} is not {api}"
    for probe in ("startupProbe", "readinessProbe"):
        got = engine[probe]["httpGet"]["port"]
        assert got in ("api", api), f"{probe} checks port {got}, not the api port"
    for svc in ov.objects("Service"):
        for p in svc["spec"].get("ports", []):
            if p.get("name") == "api":
                assert p.get("targetPort") in ("api", api), f"Service {svc['metadata']['name']} " \
                    f"sends its api port to {p.get('targetPort')}"


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


def check_router_wiring(ctx, ov):
    """The router setting: rdzvd allows what the agents name (empty: none,
    which rdzvd takes as nothing allowed), and the engine's stop hook asks
    the agent to drain through its socket's .drain file, within the Pod's
    grace period."""
    agent, engine = ov.agent_and_engine()
    assert flag_value(ov.rdzvd_args(), "--router-allow") == ov.env(agent)["RDZV_ROUTER"] == "", \
        (ov.rdzvd_args(), ov.env(agent).get("RDZV_ROUTER"))
    hook = engine["lifecycle"]["preStop"]["exec"]["command"]
    sock = flag_value(agent["args"], "--socket")
    assert hook[:2] == ["/bin/sh", "-c"] and hook[2].startswith("touch %s.drain;" % sock) \
        and "while [ -e %s.drain ]" % sock in hook[2], hook
    bound = int(re.search(r"\$i -lt (\d+)", hook[2]).group(1))
    grace = ov.pod()["terminationGracePeriodSeconds"]
    assert 30 < bound < grace, f"the hook waits up to {bound} s: past the agent's " \
        f"--drain-timeout (30 s) and within the grace period ({grace} s)?"


def check_settings_reach_everything(ctx, ov):
    """Changing each value in the settings alone changes every place that uses it."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "k")
        shutil.copytree(ctx.kdir, copy)
        path = os.path.join(copy, "settings", "kustomization.yaml")
        with open(path) as f:
            text = f.read()
        new = {"GROUP": "other", "WORLD": "8", "TP": "4", "PORT_BASE": "20000",
               "PORT_LIMIT": "30000", "PORTS_PER_RANK": "16",
               "ROUTER": "http://vllm-router:30000", "ENGINE_UID": "2000"}
        for k, v in new.items():
            text, n = re.subn(r"- %s=\S*" % k, "- %s=%s" % (k, v), text)
            assert n == 1, f"settings have {n} {k}"
        text = text.replace("newTag: 0.2.0", "newTag: 9.9.9")
        with open(path, "w") as f:
            f.write(text)
        o = Overlay(copy, ov.name)
    agent, engine = o.agent_and_engine()
    # One uid: the engine runs as it and the agent lends ports to it.
    assert engine["securityContext"]["runAsUser"] == 2000, engine["securityContext"]
    assert flag_value(o.args(agent), "--allow-uid") == "2000", o.args(agent)
    args = o.rdzvd_args()
    assert str(o.world_of_workload()) == "8" and o.env(agent)["RDZV_WORLD"] == "8"
    assert str(engine["resources"]["limits"]["nvidia.com/gpu"]) == "4"
    assert o.env(engine)["TP"] == "4" and o.env(engine)["PORTS_PER_RANK"] == "16"
    assert (flag_value(args, "--port-base"), flag_value(args, "--port-limit"),
            flag_value(args, "--ports-per-rank")) == ("20000", "30000", "16"), args
    assert o.one("NetworkPolicy", "llm-ranks")["spec"]["ingress"][0]["ports"][0]["port"] == 20000
    assert o.env(agent)["RDZV_GROUP"].startswith("other")
    assert flag_value(args, "--router-allow") == o.env(agent)["RDZV_ROUTER"] \
        == "http://vllm-router:30000", (args, o.env(agent).get("RDZV_ROUTER"))
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


def run_engine_script(ctx, ov, envfile_text, tmp, wait_first=True):
    """The engine's script of ov in a real shell with a stand-in for vllm,
    fed envfile_text as the agent's env file: (its exit status, the
    arguments vllm got or None, its env, the run dir, the env file)."""
    agent, engine = ov.agent_and_engine()
    sock = flag_value(agent["args"], "--socket")
    rundir = os.path.dirname(sock)
    fake = os.path.join(tmp, "bin")
    os.mkdir(fake)
    with open(os.path.join(fake, "vllm"), "w") as f:
        f.write('#!/bin/sh\nprintf "%s\\n" "$@" > "$OUT"\n')
    os.chmod(os.path.join(fake, "vllm"), 0o755)
    run = os.path.join(tmp, "run")
    os.mkdir(run)
    script = script_of(engine).replace(rundir + "/", run + "/")
    env = {k: v for k, v in ov.env(engine).items() if k != "LD_PRELOAD"}
    out = os.path.join(tmp, "args")
    env.update(PATH=fake + ":/usr/bin:/bin", OUT=out)
    p = subprocess.Popen(["/bin/sh", "-c", script], env=env, stderr=subprocess.PIPE, text=True)
    if wait_first:
        time.sleep(1.5)
        assert p.poll() is None, "the script did not wait for the env file"
    envfile = os.path.join(run, os.path.basename(sock) + ".env")
    with open(envfile + ".tmp", "w") as f:
        f.write(envfile_text)
    os.rename(envfile + ".tmp", envfile)
    _, err = p.communicate(timeout=10)
    got = open(out).read().split("\n")[:-1] if os.path.exists(out) else None
    return p.returncode, got, err, env, (rundir, run, envfile)


def check_engine_script_runs(ctx, ov):
    """The engine's script in a real shell, with a stand-in for vllm and a
    real assignment's env file: it waits for the file, passes vllm the
    assignment's numbers and the settings' flags (expert parallel on, no
    extra ones by default), and (StatefulSet) its liveness probe passes
    until the agent's epoch moves on."""
    agent, engine = ov.agent_and_engine()
    with tempfile.TemporaryDirectory() as tmp:
        rc, got, err, env, (rundir, run, envfile) = run_engine_script(ctx, ov, ctx.env_text, tmp)
        assert rc == 0, "the script failed: " + err
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
        assert ov.env(engine)["EXPERT_PARALLEL"] == "true" and "--enable-expert-parallel" in got, got
        assert "" not in got, f"an empty argument reached vllm: {got}"
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


def check_engine_settings(ctx, ov):
    """EXPERT_PARALLEL and ENGINE_ARGS, set in the settings alone, reach
    vllm serve: a dense model runs without --enable-expert-parallel, extra
    flags arrive as separate words, and a value of EXPERT_PARALLEL other
    than true or false stops the script before vllm starts."""
    extra = "--max-model-len 8192 --gpu-memory-utilization 0.85"
    o = render_with(ctx, ov.name, {"EXPERT_PARALLEL": "false", "ENGINE_ARGS": extra})
    with tempfile.TemporaryDirectory() as tmp:
        rc, got, err, _, _ = run_engine_script(ctx, o, ctx.env_text, tmp, wait_first=False)
    assert rc == 0, err
    assert "--enable-expert-parallel" not in got, got
    assert got[-4:] == extra.split(), got
    assert flag_value(got, "--max-model-len") == "8192", got
    o = render_with(ctx, ov.name, {"EXPERT_PARALLEL": "yes"})
    with tempfile.TemporaryDirectory() as tmp:
        rc, got, err, _, _ = run_engine_script(ctx, o, ctx.env_text, tmp, wait_first=False)
    assert rc == 2 and got is None and "EXPERT_PARALLEL" in err, (rc, got, err)


def check_cache_settings(ctx, ov):
    """The model cache: an emptyDir by default; the settings' cache-pvc
    and cache-hostpath components make it a claim or a node directory,
    mounted where HF_HOME points, and the result still validates."""
    def cache(o):
        _, engine = o.agent_and_engine()
        hf = o.env(engine)["HF_HOME"]
        vol = volume_at(engine, hf)
        return {v["name"]: v for v in o.pod()["volumes"]}[vol]
    assert "emptyDir" in cache(ov), cache(ov)
    k8s = os.path.join(ctx.root, "tests", "ops", "k8s")
    for comp, want in (("cache-pvc", {"persistentVolumeClaim": {"claimName": "model-cache"}}),
                       ("cache-hostpath", {"hostPath": {"path": "/var/cache/rdzv-models",
                                                        "type": "Directory"}})):
        o = render_with(ctx, ov.name, components=[comp])
        got = cache(o)
        assert {k: v for k, v in got.items() if k != "name"} == want, f"{comp}: {got}"
        if os.path.isdir(os.path.join(k8s, "node_modules")):
            p = subprocess.run(["node", os.path.join(k8s, "validate.mjs")], input=o.text,
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, (p.stdout + p.stderr).strip()


CHECKS = [check_official_schemas, check_rdzvd_deployment, check_rdzvd_probes_and_metrics_port,
          check_rdzvd_service, check_rdzvd_secrets, check_native_sidecar,
          check_socket_path_everywhere, check_agent_flags_and_variables,
          check_agent_reaches_rdzvd, check_agent_secrets, check_uids, check_engine_command, check_engine_api_port,
          check_engine_variables_exist, check_world_set_once, check_images_set_once,
          check_settings_reach_everything, check_router_wiring, check_network_policy,
          check_no_service_named_like_the_lws, check_engine_script_runs, check_engine_settings,
          check_cache_settings]


def check_readme_versions(ctx):
    with open(os.path.join(ctx.kdir, "README.md")) as f:
        head = f.read()[:3000]
    for want in ("Kubernetes 1.29", "LeaderWorkerSet v0.6", "kubectl 1.27"):
        assert want in head, f"examples/kubernetes/README.md does not state {want!r} at the top"


def http_token_secret(ctx, ov):
    """(Secret, key) that rdzvd's --http-token file comes from."""
    dep, c = ov.rdzvd()
    path = flag_value(ov.rdzvd_args(), "--http-token")
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    return vols[volume_at(c, path)]["secret"]["secretName"], os.path.basename(path)


def secrets_on_disk(ctx, tmp):
    """make-secrets.sh --print's Secrets: each a YAML file of tmp/yaml and
    its keys as files of tmp/NAME (a mounted Secret)."""
    os.mkdir(os.path.join(tmp, "yaml"))
    for d in ctx.print_secrets():
        name = d["metadata"]["name"]
        with open(os.path.join(tmp, "yaml", name), "w") as f:
            yaml.safe_dump(d, f)
        os.mkdir(os.path.join(tmp, name))
        for k, v in d["data"].items():
            with open(os.path.join(tmp, name, k), "wb") as f:
                f.write(base64.b64decode(v))


def scrape(url, token=None):
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def check_podmonitor(ctx):
    """monitoring/'s PodMonitor scrapes rdzvd's Pods on --http's port at
    /metrics with the bearer token of the Secret rdzvd's --http-token comes
    from; validated against the Operator's CRD models. A real rdzvd with
    that Secret's token answers the PodMonitor's scrape, and 401 to one
    without the token (what a prometheus.io annotation scrape sends)."""
    ov = ctx.overlay("statefulset")
    mon = Overlay(ctx.kdir, "monitoring")
    pm = mon.one("PodMonitor", "rdzvd")
    k8s = os.path.join(ctx.root, "tests", "ops", "k8s")
    if os.path.isdir(os.path.join(k8s, "node_modules")):
        p = subprocess.run(["node", os.path.join(k8s, "validate.mjs")], input=mon.text,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (p.stdout + p.stderr).strip()
    dep, c = ov.rdzvd()
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items(), pm["spec"]["selector"]
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    ports = {p.get("name"): p["containerPort"] for p in c["ports"]}
    assert ports.get(ep["port"]) == http_port(ov), f"port {ep['port']} is not --http's ({ports})"
    assert ep.get("path", "/metrics") == "/metrics", ep
    auth = ep["authorization"]
    assert auth.get("type", "Bearer") == "Bearer", auth
    secret, key = http_token_secret(ctx, ov)
    assert (auth["credentials"]["name"], auth["credentials"]["key"]) == (secret, key), auth
    assert key in ctx.secrets[secret], f"make-secrets.sh makes no {secret} {key}"
    with tempfile.TemporaryDirectory() as tmp:
        secrets_on_disk(ctx, tmp)
        port = rdzvtest.free_port()
        d = rdzvtest.Rdzvd(ctx.rdzvd, tmp, "--no-nccl", "--http", "127.0.0.1:%d" % port,
                           "--http-token", os.path.join(tmp, secret, key))
        try:
            url = "http://127.0.0.1:%d%s" % (port, ep.get("path", "/metrics"))
            token = open(os.path.join(tmp, auth["credentials"]["name"],
                                      auth["credentials"]["key"])).read().strip()
            status, body = scrape(url, token)
            assert status == 200 and "rdzv_" in body, status
            assert scrape(url)[0] == 401, "a scrape without the token was answered"
        finally:
            d.stop()


def doc_block(path, after):
    """The first fenced block of a doc after the line holding `after`."""
    text = open(path).read()
    i = text.index(after)
    m = re.search(r"```[a-z]*\n(.*?)```", text[i:], re.S)
    return [line.strip() for line in m.group(1).splitlines()]


def check_docs_watch_it_form(ctx):
    """docs/deployment.md's "Watch it form", run as written where it can
    be here: the token read from its Secret with kubectl (a stand-in that
    renders the Secret make-secrets.sh made with the real kubectl) and the
    curl with it against a real rdzvd with that --http-token, which answers
    the group; and `rdzv status` with the agent container's own
    environment (the Secrets where the Pod mounts them), against a real
    rdzvd with the Secrets' keys and token."""
    doc = os.path.join(ctx.root, "docs", "deployment.md")
    lines = doc_block(doc, "**Watch it form**")
    ov = ctx.overlay("statefulset")
    agent, _ = ov.agent_and_engine()
    secret, key = http_token_secret(ctx, ov)
    with tempfile.TemporaryDirectory() as tmp:
        secrets_on_disk(ctx, tmp)
        # rdzvd as the manifests run it: keys, group token, HTTP token.
        sdir = os.path.join(tmp, "rdzvd")
        os.mkdir(sdir)
        port = rdzvtest.free_port()
        d = rdzvtest.Rdzvd(ctx.rdzvd, sdir, "--no-nccl", "--http", "127.0.0.1:%d" % port,
                           "--curve-secret", os.path.join(tmp, "rdzv-server-curve", "server.key_secret"),
                           "--clients", os.path.join(tmp, "rdzv-clients"),
                           "--group-token", os.path.join(tmp, "rdzv-group-token", "token"),
                           "--http-token", os.path.join(tmp, secret, key))
        try:
            # The agent's environment, its mounts moved under tmp.
            env = {k: v for k, v in ov.env(agent).items() if not v.startswith("<fieldRef")}
            for name in ("RDZV_CURVE_SERVER_PUBLIC", "RDZV_CURVE_SECRET", "RDZV_GROUP_TOKEN"):
                vol = volume_at(agent, env[name])
                sec = {v["name"]: v for v in ov.pod()["volumes"]}[vol]["secret"]["secretName"]
                env[name] = os.path.join(tmp, sec, os.path.basename(env[name]))
            env["RDZV_SERVER"] = d.endpoint
            join = subprocess.run([ctx.rdzv, "join", "--world", "1", "--rank", "0", "--timeout", "10"],
                                  env=dict(os.environ, **env), capture_output=True, text=True,
                                  timeout=30)
            assert join.returncode == 0, join.stderr
            group = env["RDZV_GROUP"]
            # kubectl exec POD -c CONTAINER -- COMMAND
            (ex,) = [l for l in lines if " exec " in l]
            words = shlex.split(ex, comments=True)
            assert words[words.index("-c") + 1] == agent["name"], ex
            cmd = words[words.index("--") + 1:]
            dockerfile = open(os.path.join(ctx.kdir, "Dockerfile")).read()
            path = re.search(r"^ENV PATH=(\S+)", dockerfile, re.M).group(1).split(":")
            assert os.path.dirname(agent["command"][0]) in path, \
                f"{cmd[0]} is not on the image's PATH {path}"
            assert cmd[0] == os.path.basename(agent["command"][0]), cmd
            st = subprocess.run([ctx.rdzv, *cmd[1:]], env=dict(os.environ, **env),
                                capture_output=True, text=True, timeout=30)
            assert st.returncode == 0, f"{' '.join(cmd)} in the agent's environment: {st.stderr}"
            assert re.search(r"^%s\s+1\s+1\b" % re.escape(group), st.stdout, re.M), st.stdout
            # TOKEN=$(kubectl get secret ...); curl -H ... with it.
            shell = [l for l in lines if l.startswith("TOKEN=") or l.startswith("curl ")]
            assert len(shell) == 2 and shell[0].startswith("TOKEN="), lines
            bindir = os.path.join(tmp, "bin")
            os.mkdir(bindir)
            with open(os.path.join(bindir, "kubectl"), "w") as f:
                f.write('#!/bin/sh\n# No cluster here: `get secret NAME -o FMT` renders the '
                        'Secret make-secrets.sh made with the real kubectl.\n'
                        'while [ "$1" = -n ]; do shift 2; done\n'
                        '[ "$1 $2" = "get secret" ] || exit 3\n'
                        'f=%s/yaml/$3; shift 3\n'
                        'exec "$REAL_KUBECTL" patch --local -f "$f" --type merge -p "{}" "$@"\n'
                        % tmp)
            os.chmod(os.path.join(bindir, "kubectl"), 0o755)
            script = "\n".join(shell).replace("localhost:9400", "127.0.0.1:%d" % port)
            script = script.replace("/v1/groups/llm", "/v1/groups/" + group)
            p = subprocess.run(["/bin/sh", "-ec", script], capture_output=True, text=True,
                               timeout=30, env=dict(os.environ, REAL_KUBECTL=shutil.which("kubectl"),
                                                    PATH=bindir + ":" + os.environ["PATH"]))
            assert p.returncode == 0, p.stderr
            got = json.loads(p.stdout)["groups"]
            assert [(g["group"], g["complete"]) for g in got] == [(group, True)], p.stdout[:300]
        finally:
            d.stop()
    return "curl with the Secret's token and rdzv status in the agent's environment"


def check_docs_curl_token(ctx):
    """Every curl in the docs of the example that asks rdzvd's /metrics or
    /v1/ sends the bearer token: the manifests give rdzvd --http-token, and
    without it the answer is 401."""
    bad = []
    for path in (os.path.join(ctx.root, "docs", "deployment.md"),
                 os.path.join(ctx.kdir, "README.md")):
        for n, line in enumerate(open(path), 1):
            if re.search(r"\bcurl\b.*(/metrics|/v1/)", line) and "Authorization: Bearer" not in line:
                bad.append("%s:%d: %s" % (os.path.relpath(path, ctx.root), n, line.strip()))
    assert not bad, "curl without the token: " + "; ".join(bad)


if __name__ == "__main__":
    sys.exit(manifests.run(CHECKS, whole=[check_readme_versions, check_podmonitor,
                                          check_docs_watch_it_form, check_docs_curl_token]))
