// The structure of a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) as its CRD
// states it, read from kubernetes-sigs/lws v0.10.0
// (commit 2161f38ff333f9e24d3c44adef7cd5d9787cac00, unchanged on main at
// 060ab4da17eea1f0865fcbd3236bb1075e2cea32):
//   config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml
//   api/leaderworkerset/v1/leaderworkerset_types.go
// The CRD is not copied here: only the LWS-owned levels are written out, and
// the embedded core types are left to kubernetes-models' official models
// ({model: ...}). Every object with `properties` is closed: the API server
// prunes fields a structural schema does not name (or, with strict field
// validation, rejects them), so a misspelled field here is silently lost.
import { PodTemplateSpec, PersistentVolumeClaim } from "kubernetes-models/v1";

const int32 = { type: "integer", minimum: -2147483648, maximum: 2147483647 };
const intOrString = { intOrString: true };
const stringMap = { type: "object", additionalProperties: { type: "string" } };

// controller-gen without generateEmbeddedObjectMeta keeps only these five
// fields of an embedded ObjectMeta; anything else (generateName, ...) is pruned.
const embeddedMeta = {
  type: "object",
  properties: {
    annotations: stringMap,
    finalizers: { type: "array", items: { type: "string" } },
    labels: stringMap,
    name: { type: "string" },
    namespace: { type: "string" },
  },
};

// The official model checks the whole template; `properties` on top of it
// adds the CRD's narrower metadata.
const podTemplate = {
  model: PodTemplateSpec,
  type: "object",
  properties: { metadata: embeddedMeta, spec: {} },
};

export const lwsSpec = {
  type: "object",
  required: ["leaderWorkerTemplate"],
  properties: {
    replicas: { ...int32, minimum: 0, maximum: 1000000 },
    startupPolicy: { type: "string", enum: ["LeaderCreated", "LeaderReady"] },
    rolloutStrategy: {
      type: "object",
      required: ["type"],
      properties: {
        type: { type: "string", enum: ["RollingUpdate"] },
        rollingUpdateConfiguration: {
          type: "object",
          properties: { partition: int32, maxSurge: intOrString, maxUnavailable: intOrString },
        },
      },
    },
    networkConfig: {
      type: "object",
      required: ["subdomainPolicy"],
      properties: { subdomainPolicy: { type: "string", enum: ["Shared", "UniquePerReplica"] } },
    },
    leaderWorkerTemplate: {
      type: "object",
      required: ["workerTemplate"],
      properties: {
        leaderTemplate: podTemplate,
        workerTemplate: podTemplate,
        size: int32,
        restartPolicy: {
          type: "string",
          enum: ["Default", "RecreateGroupOnPodRestart", "RecreateGroupAfterStart", "None"],
        },
        subGroupPolicy: {
          type: "object",
          properties: {
            subGroupPolicyType: { type: "string", enum: ["LeaderWorker", "LeaderExcluded"] },
            subGroupSize: int32,
          },
        },
        volumeClaimTemplates: {
          type: "array",
          items: {
            model: PersistentVolumeClaim,
            type: "object",
            properties: { apiVersion: {}, kind: {}, metadata: embeddedMeta, spec: {}, status: {} },
          },
        },
        // No enum in the CRD (the values Retain/Delete are checked by the webhook).
        persistentVolumeClaimRetentionPolicy: {
          type: "object",
          properties: { whenDeleted: { type: "string" }, whenScaled: { type: "string" } },
        },
      },
    },
  },
};

// The CRD's root has no `required`; metadata is checked as a full ObjectMeta
// by the caller, status is the controller's and reset on create.
export const lwsSchema = {
  type: "object",
  properties: {
    apiVersion: { type: "string" },
    kind: { type: "string" },
    metadata: { type: "object" },
    spec: lwsSpec,
    status: { type: "object" },
  },
};

const typeOk = {
  object: (v) => v !== null && typeof v === "object" && !Array.isArray(v),
  array: Array.isArray,
  string: (v) => typeof v === "string",
  integer: Number.isInteger,
};

// Checks `value` against a node of the schemas above. `checkModel(cls, value,
// path)` validates with an official model (strictly) and returns messages.
export function checkSchema(node, value, path, checkModel) {
  const errs = node.model ? checkModel(node.model, value, path) : [];
  if (node.intOrString && !Number.isInteger(value) && typeof value !== "string") {
    errs.push(`${path} must be integer or string`);
  }
  if (node.type && !typeOk[node.type](value)) return [...errs, `${path} must be ${node.type}`];
  if (node.enum && !node.enum.includes(value)) {
    errs.push(`${path} must be one of ${node.enum.join(", ")} (got ${JSON.stringify(value)})`);
  }
  if (node.minimum !== undefined && value < node.minimum) errs.push(`${path} must be >= ${node.minimum}`);
  if (node.maximum !== undefined && value > node.maximum) errs.push(`${path} must be <= ${node.maximum}`);
  if (node.items) value.forEach((v, i) => errs.push(...checkSchema(node.items, v, `${path}/${i}`, checkModel)));
  if (node.type === "object") {
    for (const r of node.required || []) if (value[r] === undefined) errs.push(`${path} must have required property ${r}`);
    for (const [k, v] of Object.entries(value)) {
      if (v === undefined) continue; // absent, as in JSON
      const sub = node.properties ? node.properties[k] : node.additionalProperties;
      if (sub) errs.push(...checkSchema(sub, v, `${path}/${k}`, checkModel));
      else if (node.properties) errs.push(`${path}/${k}: unknown field "${k}"`);
    }
  }
  return errs;
}
