// Server-side apply's logic with no store and no HTTP: field sets and their
// fieldsV1 encoding, what a write owns, merging by schema, pruning, conflicts
// and ownership moving, with the shapes kube-apiserver 1.32 produces.
#include "managed_fields.h"
#include "field_set.h"
#include "structured_merge.h"

#include "k8s4r/kube_sim/resource_type.h"

#include <gtest/gtest.h>

namespace k8s4r::kube_sim {
namespace {

using nlohmann::json;

ApplySchema config_maps() {
  ResourceType type;
  type.kind = "ConfigMap";
  type.builtin = true;
  return apply_schema_for(type);
}

// A custom resource's schema: a keyed list, a set, an atomic list, a map.
ApplySchema widgets() {
  return ApplySchema(std::make_shared<const json>(json::parse(R"({"type":"object","properties":{
    "spec":{"type":"object","properties":{
      "size":{"type":"integer"},
      "ports":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["port","protocol"],
        "items":{"type":"object","properties":{"port":{"type":"integer"},"protocol":{"type":"string"},
                                               "name":{"type":"string"}}}},
      "tags":{"type":"array","x-kubernetes-list-type":"set","items":{"type":"string"}},
      "steps":{"type":"array","items":{"type":"string"}},
      "env":{"type":"object","additionalProperties":{"type":"string"}},
      "selector":{"type":"object","x-kubernetes-map-type":"atomic","properties":{"app":{"type":"string"}}}}},
    "status":{"type":"object","properties":{"state":{"type":"string"}}}}})")),
                     true);
}

json widget(const json& spec) {
  return {{"apiVersion", "example.com/v1"}, {"kind", "Widget"}, {"metadata", {{"name", "w"}}}, {"spec", spec}};
}

const FieldWriter kApplier{"kubectl", "example.com/v1", ""};
const FieldScope kMainResource = field_scope(true, false);

json fields_of(const ManagedFields& managed, const std::string& manager) {
  for (const ManagedFieldsEntry& entry : managed) {
    if (entry.manager == manager) return entry.fields.to_fields_v1();
  }
  return nullptr;
}

TEST(FieldSetTest, EncodesAsFieldsV1WithDotForOwnedNodesThatHaveOwnedChildren) {
  FieldSet set;
  set.insert({"f:spec", "f:ports", R"(k:{"port":80,"protocol":"TCP"})"});
  set.insert({"f:spec", "f:ports", R"(k:{"port":80,"protocol":"TCP"})", "f:name"});
  set.insert({"f:metadata", "f:finalizers", R"(v:"a/b")"});
  const json expected = json::parse(R"({"f:metadata":{"f:finalizers":{"v:\"a/b\"":{}}},
    "f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{}}}}})");
  EXPECT_EQ(set.to_fields_v1(), expected);
  auto decoded = FieldSet::from_fields_v1(expected);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded.value(), set);
  EXPECT_TRUE(set.has({"f:spec", "f:ports", R"(k:{"port":80,"protocol":"TCP"})"}));
  EXPECT_FALSE(set.has({"f:spec", "f:ports"}));
  EXPECT_TRUE(set.touches({"f:spec", "f:ports"}));

  EXPECT_FALSE(FieldSet::from_fields_v1(json::parse(R"({"f:a":"x"})")).has_value());
  EXPECT_TRUE(FieldSet::from_fields_v1(json::parse(R"({"z:unknown":{},"f:a":{}})")).value().has({"f:a"}));
}

TEST(FieldSetTest, PathsAreNamedAsConflictsNameThem) {
  EXPECT_EQ(path_string({"f:spec", "f:ports", R"(k:{"port":80,"protocol":"TCP"})", "f:name"}),
            R"(.spec.ports[port=80,protocol="TCP"].name)");
  EXPECT_EQ(path_string({"f:metadata", "f:annotations", "f:a.b/c"}), ".metadata.annotations.a.b/c");
  EXPECT_EQ(path_string({"f:metadata", "f:finalizers", R"(v:"x")"}), R"(.metadata.finalizers[="x"])");
  EXPECT_EQ(path_string({"f:items", "i:3"}), ".items[3]");
}

TEST(ManagedFieldsTest, AnApplyOwnsLeavesAndMapKeysButNotDeclaredStructs) {
  const json config = json::parse(R"({"apiVersion":"v1","kind":"ConfigMap",
    "metadata":{"name":"x","namespace":"default","labels":{"app":"a"}},"data":{"k":"v"}})");
  auto applied = apply_config(config_maps(), json::object(), config, {}, {"kubectl", "v1", ""}, false, {}, "T1");
  ASSERT_TRUE(applied.has_value()) << applied.error().to_string();
  EXPECT_TRUE(applied.value().changed);
  ASSERT_EQ(applied.value().managed.size(), 1u);
  // As the Kubernetes docs show it: no "." on data or labels, no name or namespace.
  EXPECT_EQ(applied.value().managed[0].fields.to_fields_v1(),
            json::parse(R"({"f:data":{"f:k":{}},"f:metadata":{"f:labels":{"f:app":{}}}})"));
  EXPECT_TRUE(applied.value().managed[0].apply);
  EXPECT_EQ(applied.value().managed[0].time, "T1");
}

TEST(ManagedFieldsTest, ACreateRecordsNewMapsAsOwnedNodes) {
  const json created = json::parse(R"({"apiVersion":"v1","kind":"ConfigMap",
    "metadata":{"name":"x","uid":"u","labels":{"app":"a"}},"data":{"k":"v"}})");
  auto managed = track_update(config_maps(), nullptr, created, {}, {"kubectl-create", "v1", ""}, {}, "T1");
  ASSERT_TRUE(managed.has_value());
  EXPECT_EQ(fields_of(managed.value(), "kubectl-create"),
            json::parse(R"({"f:data":{".":{},"f:k":{}},"f:metadata":{"f:labels":{".":{},"f:app":{}}}})"));
  const json encoded = encode_managed_fields(managed.value());
  EXPECT_EQ(encoded[0]["operation"], "Update");
  EXPECT_EQ(encoded[0]["apiVersion"], "v1");
  EXPECT_EQ(encoded[0]["time"], "T1");
  EXPECT_FALSE(encoded[0].contains("subresource"));
}

TEST(ManagedFieldsTest, AnUpdateTakesWhatItChangesAndANoOpMovesNoTime) {
  json live = json::parse(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","uid":"u"},
    "data":{"a":"1","b":"2"}})");
  ManagedFields managed = track_update(config_maps(), nullptr, live, {}, {"creator", "v1", ""}, {}, "T1").value();

  json changed = live;
  changed["data"]["a"] = "changed";
  changed["data"].erase("b");
  managed = track_update(config_maps(), &live, changed, managed, {"editor", "v1", ""}, {}, "T2").value();
  EXPECT_EQ(fields_of(managed, "creator"), json::parse(R"({"f:data":{}})"));  // owns the map itself
  EXPECT_EQ(fields_of(managed, "editor"), json::parse(R"({"f:data":{"f:a":{}}})"));

  auto again = track_update(config_maps(), &changed, changed, managed, {"editor", "v1", ""}, {}, "T3").value();
  EXPECT_EQ(encode_managed_fields(again), encode_managed_fields(managed));

  // An object whose managedFields were cleared stays untracked.
  EXPECT_TRUE(track_update(config_maps(), &live, changed, {}, {"editor", "v1", ""}, {}, "T2").value().empty());
}

TEST(ManagedFieldsTest, ChangingAnotherManagersFieldConflictsUnlessForcedAndTheSameValueIsShared) {
  const json live = json::parse(R"({"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","uid":"u"},
    "spec":{"size":1,"steps":["a"]}})");
  ManagedFields managed =
      track_update(widgets(), nullptr, live, {}, {"controller", "example.com/v1", ""}, kMainResource, "T1").value();

  auto refused = apply_config(widgets(), live, widget({{"size", 2}, {"steps", {"a", "b"}}}), managed, kApplier, false,
                              kMainResource, "T2");
  ASSERT_TRUE(refused.has_value());
  ASSERT_EQ(refused.value().conflicts.size(), 2u);
  EXPECT_EQ(conflict_message(refused.value().conflicts),
            "Apply failed with 2 conflicts: conflicts with \"controller\" using example.com/v1:\n- .spec.size\n- "
            ".spec.steps");
  EXPECT_EQ(conflict_causes(refused.value().conflicts)[0],
            json({{"reason", "FieldManagerConflict"},
                  {"message", "conflict with \"controller\" using example.com/v1"},
                  {"field", ".spec.size"}}));

  // The same value: no conflict, both own it.
  auto shared = apply_config(widgets(), live, widget({{"size", 1}}), managed, kApplier, false, kMainResource, "T2");
  ASSERT_TRUE(shared.has_value());
  EXPECT_TRUE(shared.value().conflicts.empty());
  EXPECT_FALSE(shared.value().changed);
  EXPECT_EQ(fields_of(shared.value().managed, "kubectl"), json::parse(R"({"f:spec":{"f:size":{}}})"));
  // The creator made .spec itself too ("."), as an Update records a new map.
  EXPECT_EQ(fields_of(shared.value().managed, "controller"),
            json::parse(R"({"f:spec":{".":{},"f:size":{},"f:steps":{}}})"));
  for (const ManagedFieldsEntry& entry : shared.value().managed) {
    if (entry.manager == "kubectl") {
      EXPECT_EQ(entry.time, "") << "a no-op apply sets no time";
    }
  }

  auto forced = apply_config(widgets(), live, widget({{"size", 2}}), managed, kApplier, true, kMainResource, "T2");
  ASSERT_TRUE(forced.has_value());
  EXPECT_TRUE(forced.value().conflicts.empty());
  EXPECT_EQ(forced.value().object["spec"]["size"], 2);
  EXPECT_EQ(fields_of(forced.value().managed, "controller"), json::parse(R"({"f:spec":{".":{},"f:steps":{}}})"));
}

TEST(ManagedFieldsTest, FieldsAnApplierDropsAreRemovedUnlessSomeoneElseOwnsThem) {
  ManagedFields managed;
  json live = json::object();
  auto first =
      apply_config(widgets(), live, widget({{"size", 1}, {"tags", {"x", "y"}}, {"env", {{"A", "1"}, {"B", "2"}}}}),
                   managed, kApplier, false, kMainResource, "T1");
  ASSERT_TRUE(first.has_value());
  live = first.value().object;
  live["metadata"]["uid"] = "u";
  managed = first.value().managed;

  // Someone else also sets env.B to the value it has.
  json other_config = widget({{"env", {{"B", "2"}}}});
  auto other =
      apply_config(widgets(), live, other_config, managed, {"helm", "example.com/v1", ""}, false, kMainResource, "T2");
  ASSERT_TRUE(other.has_value());
  managed = other.value().managed;

  auto second = apply_config(widgets(), live, widget({{"size", 1}, {"tags", {"y"}}}), managed, kApplier, false,
                             kMainResource, "T3");
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second.value().object["spec"], json::parse(R"({"size":1,"tags":["y"],"env":{"B":"2"}})"));
  EXPECT_EQ(fields_of(second.value().managed, "kubectl"),
            json::parse(R"({"f:spec":{"f:size":{},"f:tags":{"v:\"y\"":{}}}})"));
}

TEST(ManagedFieldsTest, KeyedListsMergeItemByItemAndAtomicOnesAreReplaced) {
  const json live = json::parse(R"({"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","uid":"u"},
    "spec":{"ports":[{"port":80,"protocol":"TCP","name":"http"},{"port":53,"protocol":"UDP","name":"dns"}],
            "steps":["a","b"],"selector":{"app":"x"}}})");
  ManagedFields managed =
      track_update(widgets(), nullptr, live, {}, {"controller", "example.com/v1", ""}, kMainResource, "T1").value();
  auto applied = apply_config(
      widgets(), live,
      widget({{"ports", {{{"port", 443}, {"protocol", "TCP"}}, {{"port", 80}, {"protocol", "TCP"}, {"name", "web"}}}},
              {"steps", {"c"}}}),
      managed, kApplier, true, kMainResource, "T2");
  ASSERT_TRUE(applied.has_value()) << applied.error().to_string();
  // structured-merge-diff's order: the config's items in its order, live-only ones after those they followed.
  EXPECT_EQ(applied.value().object["spec"]["ports"], json::parse(R"([{"port":443,"protocol":"TCP"},
    {"port":80,"protocol":"TCP","name":"web"},{"port":53,"protocol":"UDP","name":"dns"}])"));
  EXPECT_EQ(applied.value().object["spec"]["steps"], json::parse(R"(["c"])"));
  EXPECT_EQ(applied.value().object["spec"]["selector"], json::parse(R"({"app":"x"})"));

  auto refused =
      apply_config(widgets(), live, widget({{"ports", {{{"port", 80}, {"protocol", "TCP"}, {"name", "web"}}}}}),
                   managed, kApplier, false, kMainResource, "T2");
  ASSERT_EQ(refused.value().conflicts.size(), 1u);
  EXPECT_EQ(conflict_message(refused.value().conflicts),
            "Apply failed with 1 conflict: conflict with \"controller\" using example.com/v1: "
            ".spec.ports[port=80,protocol=\"TCP\"].name");

  auto missing_key = apply_config(widgets(), live, widget({{"ports", {{{"port", 8}}}}}), managed, kApplier, false,
                                  kMainResource, "T2");
  ASSERT_FALSE(missing_key.has_value());
  EXPECT_EQ(missing_key.error().to_string(),
            ".spec.ports: associative list with keys has an element that omits key field \"protocol\" (and doesn't "
            "have default value)");
}

TEST(ManagedFieldsTest, UndeclaredFieldsOfACustomResourceAreRefusedAndStatusIsNotOwnedThroughTheMainResource) {
  auto unknown =
      apply_config(widgets(), json::object(), widget({{"colour", "red"}}), {}, kApplier, false, kMainResource, "T1");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().to_string(), ".spec.colour: field not declared in schema");

  json config = widget({{"size", 1}});
  config["status"] = {{"state", "done"}};
  auto applied = apply_config(widgets(), json::object(), config, {}, kApplier, false, kMainResource, "T1");
  ASSERT_TRUE(applied.has_value());
  EXPECT_EQ(fields_of(applied.value().managed, "kubectl"), json::parse(R"({"f:spec":{"f:size":{}}})"));
}

TEST(ManagedFieldsTest, TheFirstApplyToAnUntrackedObjectConflictsWithBeforeFirstApply) {
  const json live = json::parse(R"({"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","uid":"u"},
    "spec":{"size":1}})");
  auto applied = apply_config(widgets(), live, widget({{"size", 2}}), {}, kApplier, false, kMainResource, "T1");
  ASSERT_EQ(applied.value().conflicts.size(), 1u);
  EXPECT_EQ(applied.value().conflicts[0].manager_label, "\"before-first-apply\" using example.com/v1");
}

TEST(ManagedFieldsTest, UpdateEntriesAreCappedAtTenWithTheOldestMergedIntoAncientChanges) {
  json live = json::parse(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","uid":"u"},"data":{}})");
  ManagedFields managed = track_update(config_maps(), nullptr, live, {}, {"m0", "v1", ""}, {}, "T00").value();
  for (int i = 1; i <= 12; ++i) {
    json next = live;
    next["data"]["k" + std::to_string(i)] = "v";
    const std::string time = std::string("T") + (i < 10 ? "0" : "") + std::to_string(i);
    managed = track_update(config_maps(), &live, next, managed, {"m" + std::to_string(i), "v1", ""}, {}, time).value();
    live = next;
  }
  EXPECT_EQ(managed.size(), 10u);
  const json ancient = fields_of(managed, "ancient-changes");
  EXPECT_EQ(ancient, json::parse(R"({"f:data":{".":{},"f:k1":{},"f:k2":{},"f:k3":{}}})"));
  EXPECT_TRUE(fields_of(managed, "m2").is_null());
  EXPECT_FALSE(fields_of(managed, "m12").is_null());
}

TEST(ManagedFieldsTest, DecodingRefusesWhatTheRealServerRefuses) {
  auto decode = [](const char* text) { return decode_managed_fields(json::parse(text)); };
  EXPECT_EQ(
      decode(R"([{"manager":"m","operation":"Patch","apiVersion":"v1","fieldsType":"FieldsV1"}])").error().message,
      "operation must be `Apply` or `Update`");
  EXPECT_EQ(decode(R"([{"manager":"m","operation":"Update","fieldsType":"FieldsV1"}])").error().message,
            "apiVersion must not be empty");
  EXPECT_EQ(decode(R"([{"manager":"m","operation":"Update","apiVersion":"v1"}])").error().message,
            "missing fieldsType in managed fields entry 0");
  EXPECT_TRUE(resets_managed_fields(json::parse(R"({"managedFields":[]})")));
  EXPECT_TRUE(resets_managed_fields(json::parse(R"({"managedFields":[{}]})")));
  EXPECT_FALSE(resets_managed_fields(json::parse(R"({})")));
}

TEST(ManagedFieldsTest, ObjectsNestedPastTheLimitAreAnErrorNotACrash) {
  json deep = json::object();
  json* at = &deep;
  for (int i = 0; i < 5000; ++i) at = &(*at)["a"];  // built in place: no copies of the growing document
  *at = "leaf";
  ApplySchema deduced(nullptr, false);
  EXPECT_FALSE(field_set_of(deduced, deep).has_value());
  EXPECT_FALSE(compare(deduced, json::object(), deep).has_value());
  EXPECT_FALSE(merge(deduced, deep, deep).has_value());
}

TEST(ManagedFieldsTest, NullInAConfigurationOwnsTheFieldButTakesNothingAway) {
  json live = json::parse(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","uid":"u",
    "labels":{"team":"ops"}},"data":{"a":"1"}})");
  ManagedFields managed = track_update(config_maps(), nullptr, live, {}, {"ops", "v1", ""}, {}, "T1").value();
  json config = json::parse(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","labels":null},
    "data":null})");
  auto applied = apply_config(config_maps(), live, config, managed, {"kubectl", "v1", ""}, false, {}, "T2");
  ASSERT_TRUE(applied.has_value()) << applied.error().to_string();
  EXPECT_TRUE(applied.value().conflicts.empty());
  EXPECT_FALSE(applied.value().changed);
  EXPECT_EQ(applied.value().object["metadata"]["labels"], json({{"team", "ops"}}));
  EXPECT_EQ(applied.value().object["data"], json({{"a", "1"}}));
}

TEST(ManagedFieldsTest, KeyedListsKeepStructuredMergeDiffsOrder) {
  const json live = widget({{"ports", json::parse(R"([{"port":1,"protocol":"a"},{"port":2,"protocol":"b"},
    {"port":3,"protocol":"c"}])")}});
  auto merged = merge(widgets(), live, widget({{"ports", json::parse(R"([{"port":3,"protocol":"c"},
    {"port":1,"protocol":"a"}])")}}));
  ASSERT_TRUE(merged.has_value());
  std::vector<int> order;
  for (const json& port : merged.value()["spec"]["ports"]) order.push_back(port["port"].get<int>());
  EXPECT_EQ(order, (std::vector<int>{2, 3, 1}));
}

TEST(ManagedFieldsTest, AnItemTheApplierDropsGoesWholeEvenIfAnotherManagerOwnsAFieldInIt) {
  ManagedFields managed;
  auto first =
      apply_config(widgets(), json::object(), widget({{"size", 1}, {"ports", {{{"port", 80}, {"protocol", "TCP"}}}}}),
                   managed, kApplier, false, kMainResource, "T1");
  ASSERT_TRUE(first.has_value());
  json live = first.value().object;
  live["metadata"]["uid"] = "u";
  json named = live;
  named["spec"]["ports"][0]["name"] = "http";
  managed = track_update(widgets(), &live, named, first.value().managed, {"controller", "example.com/v1", ""},
                         kMainResource, "T2")
                .value();
  auto dropped = apply_config(widgets(), named, widget({{"size", 1}}), managed, kApplier, false, kMainResource, "T3");
  ASSERT_TRUE(dropped.has_value()) << dropped.error().to_string();
  EXPECT_FALSE(dropped.value().object["spec"].contains("ports") && !dropped.value().object["spec"]["ports"].empty());
}

TEST(ManagedFieldsTest, DecodingKeepsOneEntryPerWriterAndBoundsNesting) {
  auto decoded = decode_managed_fields(json::parse(R"([
    {"manager":"m","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:a":{}}},
    {"manager":"m","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:b":{}}}])"));
  ASSERT_TRUE(decoded.has_value());
  ASSERT_EQ(decoded.value().size(), 1u);
  EXPECT_TRUE(decoded.value()[0].fields.has({"f:b"}));

  json deep = json::object();
  json* at = &deep;
  for (int i = 0; i < 3000; ++i) at = &(*at)["f:" + std::string(200, 'x')];
  *at = json::object();
  EXPECT_FALSE(FieldSet::from_fields_v1(deep).has_value());
  EXPECT_FALSE(FieldSet::from_fields_v1(json::parse(R"({"k:not json":{}})")).has_value());
}

TEST(ManagedFieldsTest, MetadataTheStoreKeepsIsTrackedEvenWhereObjectMetaDoesNotDeclareIt) {
  json created = widget({{"size", 1}});
  created["metadata"]["custom"] = "kept";
  auto managed = track_update(widgets(), nullptr, created, {}, kApplier, kMainResource, "T1");
  ASSERT_TRUE(managed.has_value()) << managed.error().to_string();
  EXPECT_TRUE(managed.value()[0].fields.has({"f:metadata", "f:custom"}));
}

}  // namespace
}  // namespace k8s4r::kube_sim
