#!/usr/bin/env node
// Checks Kubernetes objects against the official OpenAPI schemas (through
// kubernetes-models, generated from Kubernetes v1.33.0's spec) and
// LeaderWorkerSets against the structure of their CRD (lws-schema.mjs), and
// the Prometheus Operator's kinds against @kubernetes-models/prometheus-operator.
// Usage: node validate.mjs [FILE|-]...   (stdin when no FILE)
// Exit: 0 all ok, 1 an object failed, 2 usage, read or YAML errors, or no objects.
import { readFileSync, realpathSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import { PodTemplateSpec } from "kubernetes-models/v1";
import { lwsSchema, checkSchema } from "./lws-schema.mjs";

// The official schemas leave additionalProperties open, so validate() alone
// passes misspelled fields, which the API server drops or (kubectl's default
// --validate=strict) rejects. kubernetes-models 4.x ships its schemas only as
// compiled ajv code (the JSON schemas are exported from 5.1 on, which needs
// Node 22), so the strict pass watches that code instead: it runs over proxies
// that record which property names the validator looks up. A validator reads
// every property its schema names, present or not, and enumerates the keys of
// maps (labels, resources.limits); a key of an object it read from but never
// asked for is not in the schema. Objects it never looks into (free-form
// schemas such as RawExtension) are left alone.
function runTracked(Model, data, path) {
  const objs = [];
  const wrap = (v, p) => {
    if (Array.isArray(v)) return v.map((x, i) => wrap(x, `${p}/${i}`));
    if (v === null || typeof v !== "object") return v;
    const rec = { p, keys: Object.keys(v), read: new Set(), listed: false };
    objs.push(rec);
    const t = {};
    for (const k of rec.keys) t[k] = wrap(v[k], `${p}/${k}`);
    const note = (k) => typeof k === "string" && rec.read.add(k);
    return new Proxy(t, {
      get: (o, k) => (note(k), o[k]),
      has: (o, k) => (note(k), k in o),
      getOwnPropertyDescriptor: (o, k) => (note(k), Reflect.getOwnPropertyDescriptor(o, k)),
      ownKeys: (o) => ((rec.listed = true), Reflect.ownKeys(o)),
    });
  };
  // The model's constructor fills in apiVersion/kind and drops undefined
  // values, as it would for validate() on the model itself.
  const tracked = wrap(new Model(data).toJSON(), path);
  const errs = [];
  try {
    Model.prototype.validate.call(tracked);
  } catch (e) {
    if (!e.errors) throw e;
    for (const x of e.errors) errs.push(`${path}${x.instancePath} ${x.message}`);
  }
  for (const o of objs) {
    if (o.listed || o.read.size === 0) continue;
    for (const k of o.keys) if (!o.read.has(k)) errs.push(`${o.p}/${k}: unknown field "${k}"`);
  }
  return errs;
}

// apiVersion/kind -> model class, from the package's own layout:
// kubernetes-models/<group>/<version> (core: kubernetes-models/<version>).
// The class must carry that apiVersion and kind, so that types that are not
// top-level kinds (DeploymentSpec, ...) are not taken for kinds.
const API_VERSION = /^(?:[a-z0-9]([a-z0-9.-]*[a-z0-9])?\/)?v[0-9]+(?:(?:alpha|beta)[0-9]+)?$/;
// Custom resources with models of their own, generated from their CRDs by
// the same project: group -> package (laid out as kubernetes-models).
const THIRD_PARTY = { "monitoring.coreos.com": "@kubernetes-models/prometheus-operator" };
async function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== "string" || !API_VERSION.test(apiVersion) || typeof kind !== "string") return null;
  const pkg = THIRD_PARTY[apiVersion.split("/")[0]];
  let mod;
  try {
    mod = await import(`${pkg || "kubernetes-models"}/${apiVersion}`);
  } catch (e) {
    // A package.json entry that node_modules lacks (installed before it
    // was added) must not read as an unknown kind.
    if (pkg && e.code === "ERR_MODULE_NOT_FOUND") throw new Error(`${pkg} is not installed: npm ci in tests/ops/k8s`);
    if (e.code === "ERR_PACKAGE_PATH_NOT_EXPORTED" || e.code === "ERR_MODULE_NOT_FOUND") return null;
    throw e;
  }
  const M = Object.hasOwn(mod, kind) ? mod[kind] : undefined;
  return M && M.apiVersion === apiVersion && M.kind === kind ? M : null;
}

// Custom resources: their own structural schema, and official models inside.
const CRDS = {
  "leaderworkerset.x-k8s.io/v1 LeaderWorkerSet": (obj) => [
    ...checkSchema(lwsSchema, obj, "", runTracked),
    // The API server checks a custom resource's metadata as a full ObjectMeta;
    // PodTemplateSpec is the smallest official model that holds one.
    ...(obj.metadata === undefined ? [] : runTracked(PodTemplateSpec, { metadata: obj.metadata }, "")),
  ],
};

// -> { ok, label: "KIND/NAME", errors: [messages], skipped? }
export async function validateObject(obj) {
  const isObj = obj !== null && typeof obj === "object" && !Array.isArray(obj);
  const kind = isObj && typeof obj.kind === "string" ? obj.kind : "?";
  const name = isObj && obj.metadata && typeof obj.metadata.name === "string" ? obj.metadata.name : "?";
  const label = `${kind}/${name}`;
  if (!isObj) return { ok: false, label, errors: ["not a mapping"] };
  // kustomization.yaml sits beside the manifests but is kustomize's input,
  // never sent to a cluster: said so, not counted either way.
  if (typeof obj.apiVersion === "string" && obj.apiVersion.startsWith("kustomize.config.k8s.io/")) {
    return { ok: true, skipped: true, label, errors: [] };
  }
  let errors;
  const crd = CRDS[`${obj.apiVersion} ${obj.kind}`];
  if (crd) errors = crd(obj);
  else {
    const M = await modelFor(obj.apiVersion, obj.kind);
    errors = M ? runTracked(M, obj, "") : [`unknown apiVersion/kind ${JSON.stringify(obj.apiVersion)} ${JSON.stringify(obj.kind)}`];
  }
  // kubectl apply and kustomize need a name; the schemas do not require one.
  if (errors.length === 0 && name === "?") errors.push("metadata.name missing");
  return { ok: errors.length === 0, label, errors };
}

// Kubernetes reads YAML as YAML 1.1 (sigs.k8s.io/yaml, go-yaml v2): 0444 is
// octal, yes/no are booleans. go-yaml gives no sexagesimal numbers (22:22
// stays a string) and timestamps end up as strings, so those tags are dropped.
const YAML_OPTS = {
  version: "1.1",
  customTags: (tags) => tags.filter((t) => t.format !== "TIME" && t.tag !== "tag:yaml.org,2002:timestamp"),
};

// -> { docs: [objects, nulls dropped], errors: [messages] }
export function parseStream(text, source = "-") {
  const docs = [];
  const errors = [];
  for (const d of parseAllDocuments(text, YAML_OPTS)) {
    if (d.errors.length) errors.push(...d.errors.map((e) => `${source}: ${e.message}`));
    else {
      const js = d.toJS();
      if (js !== null && js !== undefined) docs.push(js); // empty documents, as kubectl skips them
    }
  }
  return { docs, errors };
}

async function main(args) {
  if (args.some((a) => a === "-h" || a === "--help")) {
    console.log("usage: node validate.mjs [FILE|-]...");
    return 0;
  }
  const bad = args.find((a) => a.startsWith("-") && a !== "-");
  if (bad || (args.length === 0 && process.stdin.isTTY)) {
    console.error(`${bad ? `unknown option ${bad}\n` : ""}usage: node validate.mjs [FILE|-]...  (stdin when no FILE)`);
    return 2;
  }
  let status = 0;
  let objects = 0;
  for (const f of args.length ? args : ["-"]) {
    let text;
    try {
      text = readFileSync(f === "-" ? 0 : f, "utf8");
    } catch (e) {
      console.error(`${f}: ${e.message}`);
      status = 2;
      continue;
    }
    const { docs, errors } = parseStream(text, f);
    for (const e of errors) console.error(e);
    if (errors.length) status = 2;
    for (const d of docs) {
      const r = await validateObject(d);
      if (r.skipped) {
        console.log(`skip ${r.label} (kustomize input, not an API object)`);
        continue;
      }
      objects++;
      console.log(r.ok ? `ok ${r.label}` : `FAIL ${r.label}: ${r.errors.join("; ")}`);
      if (!r.ok && status === 0) status = 1;
    }
  }
  // An empty stream (kubectl kustomize failed in a pipe) must not pass.
  if (objects === 0 && status === 0) {
    console.error("no objects in the input");
    status = 2;
  }
  return status;
}

if (process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))) {
  process.exitCode = await main(process.argv.slice(2));
}
