// Objects the validator must reject and ones it must accept, so a dependency
// bump that loosens it (or a strict pass that flags good fields) shows up.
// Prints TAP; exits 1 on any wrong outcome.
import { validateObject, parseStream } from "./validate.mjs";

const container = (extra = {}) => ({ name: "c", image: "registry.example.com/x:1", ...extra });
const deployment = (c = container()) => ({
  apiVersion: "apps/v1",
  kind: "Deployment",
  metadata: { name: "d", labels: { app: "d" } },
  spec: {
    selector: { matchLabels: { app: "d" } },
    template: { metadata: { labels: { app: "d" } }, spec: { containers: [c] } },
  },
});
const lws = (lwt = {}, spec = {}) => ({
  apiVersion: "leaderworkerset.x-k8s.io/v1",
  kind: "LeaderWorkerSet",
  metadata: { name: "l" },
  spec: {
    leaderWorkerTemplate: { size: 2, workerTemplate: { spec: { containers: [container()] } }, ...lwt },
    ...spec,
  },
});

const podMonitor = (endpoint = {}) => ({
  apiVersion: "monitoring.coreos.com/v1",
  kind: "PodMonitor",
  metadata: { name: "p" },
  spec: {
    selector: { matchLabels: { app: "d" } },
    podMetricsEndpoints: [
      { port: "http", authorization: { type: "Bearer", credentials: { name: "t", key: "token" } }, ...endpoint },
    ],
  },
});

// [description, object, expected: "pass" or a RegExp the failure must match]
const cases = [
  ["minimal Deployment passes", deployment(), "pass"],
  [
    "Deployment with maps, int-or-string ports, native sidecar passes",
    deployment(
      container({
        restartPolicy: "Always",
        ports: [{ name: "api", containerPort: 8000 }],
        startupProbe: { httpGet: { path: "/", port: "api" } },
        resources: { limits: { "nvidia.com/gpu": 2, memory: "1Gi" } },
        env: [{ name: "A", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } }],
      }),
    ),
    "pass",
  ],
  ["container port \"abc\" fails", deployment(container({ ports: [{ containerPort: "abc" }] })), /containerPort must be integer/],
  ["probe port as a list fails", deployment(container({ livenessProbe: { httpGet: { port: [8000] } } })), /httpGet\/port must/],
  ["container field restartPolcy fails", deployment(container({ restartPolcy: "Always" })), /unknown field "restartPolcy"/],
  ["container field startupProbes fails", deployment(container({ startupProbes: {} })), /unknown field "startupProbes"/],
  [
    "unknown field deep in a probe fails",
    deployment(container({ startupProbe: { exec: { commands: ["true"] } } })),
    /containers\/0\/startupProbe\/exec\/commands: unknown field/,
  ],
  [
    "StatefulSet without spec.selector fails",
    { apiVersion: "apps/v1", kind: "StatefulSet", metadata: { name: "s" }, spec: { serviceName: "s", template: { spec: { containers: [container()] } } } },
    /must have required property selector/,
  ],
  ["minimal LeaderWorkerSet passes", lws(), "pass"],
  [
    "LeaderWorkerSet with every LWS-level field passes",
    lws(
      {
        restartPolicy: "RecreateGroupOnPodRestart",
        leaderTemplate: { metadata: { labels: { a: "b" } }, spec: { containers: [container()] } },
        subGroupPolicy: { subGroupPolicyType: "LeaderWorker", subGroupSize: 2 },
        volumeClaimTemplates: [{ metadata: { name: "v" }, spec: { accessModes: ["ReadWriteOnce"] } }],
        persistentVolumeClaimRetentionPolicy: { whenDeleted: "Delete", whenScaled: "Retain" },
      },
      {
        replicas: 2,
        startupPolicy: "LeaderReady",
        rolloutStrategy: { type: "RollingUpdate", rollingUpdateConfiguration: { maxSurge: "25%", maxUnavailable: 1, partition: 0 } },
        networkConfig: { subdomainPolicy: "UniquePerReplica" },
      },
    ),
    "pass",
  ],
  ["LWS restartPolicy Bogus fails", lws({ restartPolicy: "Bogus" }), /restartPolicy must be one of/],
  ["LWS unknown field in leaderWorkerTemplate fails", lws({ sizee: 4 }), /leaderWorkerTemplate\/sizee: unknown field/],
  ["LWS startupPolicy outside the enum fails", lws({}, { startupPolicy: "Parallel" }), /startupPolicy must be one of/],
  ["LWS without workerTemplate fails", lws({ workerTemplate: undefined }), /required property workerTemplate/],
  [
    "LWS worker container with an unknown field fails (official PodTemplateSpec)",
    lws({ workerTemplate: { spec: { containers: [container({ imagePullPolcy: "Always" })] } } }),
    /workerTemplate\/spec\/containers\/0\/imagePullPolcy: unknown field/,
  ],
  [
    "LWS template metadata the CRD prunes fails",
    lws({ workerTemplate: { metadata: { generateName: "x-" }, spec: { containers: [container()] } } }),
    /workerTemplate\/metadata\/generateName: unknown field/,
  ],
  ["unknown kind fails", { apiVersion: "apps/v1", kind: "Deploymnet", metadata: { name: "x" } }, /unknown apiVersion\/kind/],
  ["a non-kind type used as kind fails", { apiVersion: "apps/v1", kind: "DeploymentSpec", metadata: { name: "x" } }, /unknown apiVersion\/kind/],
  ["unknown apiVersion fails", { apiVersion: "example.com/v1", kind: "Widget", metadata: { name: "x" } }, /unknown apiVersion\/kind/],
  ["PodMonitor with a bearer token from a Secret passes", podMonitor(), "pass"],
  [
    "PodMonitor with a misspelled endpoint field fails",
    podMonitor({ authorisation: { type: "Bearer" } }),
    /podMetricsEndpoints\/0\/authorisation: unknown field/,
  ],
  [
    "PodMonitor whose credentials lack the key fails",
    podMonitor({ authorization: { type: "Bearer", credentials: { name: "t" } } }),
    /credentials must have required property key/,
  ],
];

let n = 0;
let bad = 0;
const report = (ok, desc, why) => {
  n++;
  if (!ok) bad++;
  console.log(`${ok ? "ok" : "not ok"} ${n} - ${desc}${ok ? "" : `\n  # ${why}`}`);
};

console.log(`1..${cases.length + 2}`);
for (const [desc, obj, want] of cases) {
  const r = await validateObject(obj);
  const msg = r.errors.join("; ");
  if (want === "pass") report(r.ok, desc, `failed: ${msg}`);
  else report(!r.ok && want.test(msg), desc, r.ok ? "passed" : `wrong failure: ${msg}`);
}

// YAML as Kubernetes reads it (1.1): octal modes, sexagesimal-looking strings.
const { docs, errors } = parseStream("a: 0444\nb: 19500:32768\n---\n", "t");
report(errors.length === 0 && docs.length === 1 && docs[0].a === 292 && docs[0].b === "19500:32768", "YAML read as Kubernetes reads it", JSON.stringify({ docs, errors }));
report(parseStream("a: [1\n", "t").errors.length > 0, "broken YAML is an error", "no error");

process.exitCode = bad ? 1 : 0;
