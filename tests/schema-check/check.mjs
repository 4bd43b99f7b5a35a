// Checks proto-schemas/ with a real JSON Schema validator (ajv):
//  1. every MQTT message example: valid-*.json must pass its schema, invalid-*.json
//     must fail it, and examples/invalid-fields.json must name the field of each
//     invalid example (the C++ codec test checks its errors against the same list);
//     the same holds for every example payload in docs/protocol.md;
//  2. with --encoded DIR: every payload the C++ codecs wrote there must pass;
//  3. every CRD in proto-schemas/crds/ is well formed and structural, as
//     kube-apiserver requires, and every manifest in examples/ validates against it.
// Usage: node check.mjs REPO_ROOT [--encoded DIR]
// Prints one line per failure and a closing "N passed, N failed" line.
import fs from "node:fs";
import path from "node:path";
import Ajv2020 from "ajv/dist/2020.js";
import Ajv from "ajv";
import addFormats from "ajv-formats";
import YAML from "yaml";

const root = path.resolve(process.argv[2] ?? ".");
const encodedIndex = process.argv.indexOf("--encoded");
const encodedDir = encodedIndex > 0 ? process.argv[encodedIndex + 1] : null;
const schemaDir = path.join(root, "proto-schemas");
let passed = 0;
let failed = 0;
const check = (ok, what) => {
  if (ok) {
    passed++;
  } else {
    failed++;
    console.log(`FAIL ${what}`);
  }
};
const explain = (validate) => (validate.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message}`).join("; ");

// ---- 1. MQTT messages --------------------------------------------------------
const messages = new Ajv2020({ allErrors: true, strict: true });
addFormats(messages);
for (const file of fs.readdirSync(schemaDir).filter((f) => f.endsWith(".schema.json"))) {
  messages.addSchema(JSON.parse(fs.readFileSync(path.join(schemaDir, file), "utf8")));
}
const schemaFor = (message) => messages.getSchema(`https://k8s4r.io/proto-schemas/${message}.schema.json`);

const examplesDir = path.join(schemaDir, "examples");
const invalidFields = JSON.parse(fs.readFileSync(path.join(examplesDir, "invalid-fields.json"), "utf8"));
const seenInvalid = new Set();
for (const message of fs.readdirSync(examplesDir).filter((d) => fs.statSync(path.join(examplesDir, d)).isDirectory())) {
  const validate = schemaFor(message);
  check(validate !== undefined, `${message}: no schema ${message}.schema.json`);
  if (!validate) continue;
  const files = fs.readdirSync(path.join(examplesDir, message)).filter((f) => f.endsWith(".json"));
  check(files.some((f) => f.startsWith("valid-")), `${message}: has no valid example`);
  check(files.filter((f) => f.startsWith("invalid-")).length >= 3, `${message}: has fewer than 3 invalid examples`);
  for (const file of files) {
    const name = `${message}/${file}`;
    const text = fs.readFileSync(path.join(examplesDir, message, file), "utf8");
    let payload;
    let parsed = true;
    try {
      payload = JSON.parse(text);
    } catch {
      parsed = false;
    }
    const ok = parsed && validate(payload);
    if (file.startsWith("valid-")) {
      check(ok, `${name}: should be valid: ${parsed ? explain(validate) : "not JSON"}`);
    } else if (file.startsWith("invalid-")) {
      check(!ok, `${name}: should be invalid but passes the schema`);
      check(name in invalidFields, `${name}: not listed in examples/invalid-fields.json`);
      seenInvalid.add(name);
    } else {
      check(false, `${name}: example names start with valid- or invalid-`);
    }
  }
}
for (const name of Object.keys(invalidFields)) {
  check(seenInvalid.has(name), `invalid-fields.json lists ${name}, which does not exist`);
}

// ---- 1b. The examples in docs/protocol.md ----------------------------------------
// Lines of ```text blocks that start with a topic, as mosquitto_sub -v prints them.
const topicSchemas = [
  [/^k8s4r\/register$/, "register"],
  [/^k8s4r\/heartbeat$/, "heartbeat"],
  [/^k8s4r\/robots\/([^/]+)\/register$/, "register"],
  [/^k8s4r\/robots\/([^/]+)\/heartbeat$/, "heartbeat"],
  [/^k8s4r\/robots\/([^/]+)\/response$/, "register-response"],
  [/^k8s4r\/robots\/([^/]+)\/tasks\/dispatch$/, "dispatch"],
  [/^k8s4r\/robots\/([^/]+)\/tasks\/([^/]+)\/status$/, "task-status"],
  [/^k8s4r\/robots\/([^/]+)\/presence$/, "presence"],
  [/^k8s4r\/robots\/([^/]+)\/acks$/, "ack"],
  [/^k8s4r\/robots\/([^/]+)\/artifacts$/, "artifacts"],
  [/^k8s4r\/robots\/([^/]+)\/logs\/request$/, "log-request"],
  [/^k8s4r\/robots\/([^/]+)\/logs\/chunks\/[^/]+$/, "log-chunk"],
];
const protocolDoc = fs.readFileSync(path.join(root, "docs", "protocol.md"), "utf8");
const documented = new Set();
for (const block of protocolDoc.matchAll(/```text\n([\s\S]*?)```/g)) {
  for (const line of block[1].split("\n").filter((l) => l.startsWith("k8s4r/"))) {
    const space = line.indexOf(" ");
    const topic = line.slice(0, space);
    const match = topicSchemas.find(([pattern]) => pattern.test(topic));
    check(match !== undefined, `docs/protocol.md: unknown topic ${topic}`);
    if (!match) continue;
    const [pattern, message] = match;
    documented.add(message);
    const payload = JSON.parse(line.slice(space + 1));
    const validate = schemaFor(message);
    check(validate(payload), `docs/protocol.md: ${topic} example fails ${message}: ${explain(validate)}`);
    const [, robotId, taskUid] = topic.match(pattern);
    if (robotId) check(payload.robotId === undefined || payload.robotId === robotId, `docs/protocol.md: ${topic}: robotId differs from the topic`);
    if (taskUid) check(payload.taskUid === taskUid, `docs/protocol.md: ${topic}: taskUid differs from the topic`);
  }
}
for (const [, message] of topicSchemas) check(documented.has(message), `docs/protocol.md has no example of ${message}`);

// ---- 2. What the C++ codecs write ------------------------------------------------
if (encodedDir) {
  let count = 0;
  for (const message of fs.readdirSync(encodedDir)) {
    const validate = schemaFor(message);
    for (const file of fs.readdirSync(path.join(encodedDir, message))) {
      const payload = JSON.parse(fs.readFileSync(path.join(encodedDir, message, file), "utf8"));
      check(validate(payload), `encoded ${message}/${file} fails its schema: ${explain(validate)}`);
      count++;
    }
  }
  check(count > 0, `no encoded payloads in ${encodedDir}`);
}

// ---- 3. CRDs and the manifests in examples/ ---------------------------------
// OpenAPI v3 as Kubernetes uses it: draft-04-like JSON Schema plus nullable and
// x-kubernetes-* extensions.
const openapi = new Ajv({ allErrors: true, strict: false });
addFormats(openapi);
for (const format of ["int32", "int64"]) openapi.addFormat(format, { type: "number", validate: Number.isInteger });
for (const format of ["float", "double"]) openapi.addFormat(format, { type: "number", validate: () => true });
// ajv knows nullable (OpenAPI) already.
for (const keyword of ["x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields",
  "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-embedded-resource",
  "x-kubernetes-validations"]) {
  openapi.addKeyword(keyword);
}

// Structural schemas (apiextensions.k8s.io/v1): every node states its type,
// unless it is int-or-string or keeps unknown fields.
function structuralErrors(node, where, errors) {
  if (node === null || typeof node !== "object") return errors;
  const exempt = node["x-kubernetes-int-or-string"] === true || node["x-kubernetes-preserve-unknown-fields"] === true;
  if (!node.type && !exempt) errors.push(`${where} has no type`);
  for (const [name, child] of Object.entries(node.properties ?? {})) structuralErrors(child, `${where}.${name}`, errors);
  if (node.items) structuralErrors(node.items, `${where}[]`, errors);
  if (typeof node.additionalProperties === "object") structuralErrors(node.additionalProperties, `${where}{}`, errors);
  return errors;
}

const crdDir = path.join(schemaDir, "crds");
const byKind = new Map();
for (const file of fs.readdirSync(crdDir).filter((f) => f.endsWith(".yaml"))) {
  const crd = YAML.parse(fs.readFileSync(path.join(crdDir, file), "utf8"));
  const what = `crds/${file}`;
  check(crd.apiVersion === "apiextensions.k8s.io/v1" && crd.kind === "CustomResourceDefinition", `${what}: not an apiextensions.k8s.io/v1 CRD`);
  check(crd.spec.group === "robot.k8s4r.io", `${what}: group is not robot.k8s4r.io`);
  check(crd.metadata.name === `${crd.spec.names.plural}.${crd.spec.group}`, `${what}: metadata.name must be <plural>.<group>`);
  check(crd.spec.scope === "Namespaced", `${what}: not namespaced`);
  check((crd.spec.names.shortNames ?? []).length > 0, `${what}: no short names`);
  const version = crd.spec.versions.find((v) => v.name === "v1alpha1");
  check(version?.served && version?.storage, `${what}: v1alpha1 is not served and stored`);
  if (!version) continue;
  // A record the manager writes whole (a result cache entry) has a spec and no status.
  const records = new Set(["TaskCacheEntry"]);
  if (!records.has(crd.spec.names.kind)) check(version.subresources?.status !== undefined, `${what}: no status subresource`);
  check((version.additionalPrinterColumns ?? []).length > 0, `${what}: no printer columns`);
  const schema = version.schema.openAPIV3Schema;
  const errors = structuralErrors(schema, crd.spec.names.kind, []);
  check(errors.length === 0, `${what}: not structural: ${errors.slice(0, 5).join("; ")}`);
  try {
    byKind.set(crd.spec.names.kind, openapi.compile(schema));
    check(true, `${what}: compiles`);
  } catch (error) {
    check(false, `${what}: schema does not compile: ${error.message}`);
  }
}
for (const kind of ["Robot", "Task", "TaskGroup", "Job"]) check(byKind.has(kind), `no CRD for ${kind}`);

const manifestDir = path.join(root, "examples");
for (const file of fs.readdirSync(manifestDir).filter((f) => f.endsWith(".yaml"))) {
  for (const document of YAML.parseAllDocuments(fs.readFileSync(path.join(manifestDir, file), "utf8"))) {
    const object = document.toJS();
    if (!object) continue;
    const validate = byKind.get(object.kind);
    check(object.apiVersion === "robot.k8s4r.io/v1alpha1", `examples/${file}: apiVersion is not robot.k8s4r.io/v1alpha1`);
    check(validate !== undefined && validate(object), `examples/${file} (${object.kind}): ${validate ? explain(validate) : "no CRD for this kind"}`);
  }
}

console.log(`schema-check: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
