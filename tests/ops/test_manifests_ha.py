#!/usr/bin/env python3
"""The HA variant of the Kubernetes example (rdzvd on etcd, active/standby),
beyond what test_manifests.py checks on every overlay: rdzvd's routing to
the leader alone, etcd's members' names, URLs, budget and policy against
each other and against rdzvd's --etcd, and the variant run for real on
loopback with the manifests' arguments: a cluster forms, one rdzvd leads,
another takes over when it stops. One line per check (rdzvtest).

    test_manifests_ha.py --source-root DIR --rdzv EXE --rdzvd EXE"""
import base64
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

import manifests
from manifests import (HA_OVERLAYS, bind_port, expand, flag_value, flags_in, http_port,
                       mount_dir, volume_at)
from rdzvtest import Fail, Skip, free_ports, http_status, wait_for

# etcd 3.5.11 brought /livez and /readyz, which the probes use.
ETCD_MIN_VERSION = (3, 5, 11)


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
                    wait_for(lambda: answers(url), f"etcd member {i} to answer {path}", 30, step=0.1)

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
            leader = wait_for(lambda: leaders(replicas), "every rdzvd healthy and exactly one ready",
                              30, step=0.1)[0]
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
            new = wait_for(lambda: leaders(rest), "a standby to take over", 20, step=0.1)[0]
            took = time.time() - t0
            assert http_status(new[2] + "/v1/groups/ha", token) == 200, "the new leader lost the group"
            return "%d members, leader in %.1f s, takeover in %.1f s" % (n, first, took)
        except (AssertionError, Fail) as e:
            logs = "".join("\n--- %s\n%s" % (log, "".join(open(os.path.join(tmp, log)).readlines()[-8:]))
                           for _, _, log in procs)
            e.args = (str(e) + logs,)
            raise
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


if __name__ == "__main__":
    sys.exit(manifests.run(HA_CHECKS, overlays=sorted(HA_OVERLAYS)))
