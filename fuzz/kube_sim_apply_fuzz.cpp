// Server-side apply and managedFields on arbitrary bodies, through the store
// as a request reaches it: the apply body (JSON or YAML), the merge by
// schema (keyed, set and atomic lists, maps), prune, conflicts, and the
// managedFields a merge patch may carry. The first byte picks the resource,
// the manager, force and the status subresource.
#include "k8s4r/kube_sim/store.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace {

using nlohmann::json;
using namespace k8s4r::kube_sim;

const char* kCrd = R"({"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
  "metadata":{"name":"widgets.example.com"},
  "spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"widgets","singular":"widget","kind":"Widget"},
    "versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
      "schema":{"openAPIV3Schema":{"type":"object","properties":{
        "spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true,"properties":{
          "size":{"type":"integer"},
          "ports":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["port","protocol"],
            "items":{"type":"object","properties":{"port":{"type":"integer"},"protocol":{"type":"string"},
                                                   "name":{"type":"string"}}}},
          "tags":{"type":"array","x-kubernetes-list-type":"set","items":{"type":"string"}},
          "steps":{"type":"array","items":{"type":"string"}},
          "env":{"type":"object","additionalProperties":{"type":"string"}},
          "selector":{"type":"object","x-kubernetes-map-type":"atomic"}}},
        "status":{"type":"object","properties":{"state":{"type":"string"}}}}}}}]}})";

const char* kWidget = R"({"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"x","labels":{"a":"b"}},
  "spec":{"size":1,"ports":[{"port":80,"protocol":"TCP","name":"http"}],"tags":["t"],"steps":["s"],"env":{"A":"1"}}})";
const char* kConfigMap = R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"k":"v"}})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  Store store(StoreOptions{}, [] { return k8s4r::Timestamp{}; });
  const Target crds{*store.find_type("apiextensions.k8s.io", "v1", "customresourcedefinitions"), ""};
  store.create(crds, json::parse(kCrd), {});
  const std::uint8_t mode = data[0];
  const bool widget = mode & 1;
  const Target target{
      widget ? *store.find_type("example.com", "v1", "widgets") : *store.find_type("", "v1", "configmaps"), "default"};
  WriteOptions options;
  options.field_manager = "creator";
  store.create(target, json::parse(widget ? kWidget : kConfigMap), options);

  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  options.field_manager = (mode & 2) ? "kubectl" : "fuzzer";
  options.force = mode & 4;
  const bool status = mode & 8;
  store.patch(target, "x", PatchType::apply, body, status, options);
  options.field_manager = "second";
  store.patch(target, "x", PatchType::apply, body, status, options);
  store.patch(target, (mode & 16) ? "x" : "new", PatchType::apply, body, false, options);
  store.patch(target, "x", PatchType::merge, body, status, options);
  return 0;
}
