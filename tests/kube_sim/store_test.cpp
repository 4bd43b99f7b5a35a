// The store's API semantics, with a fixed clock and no HTTP.
#include "k8s4r/kube_sim/store.h"

#include <gtest/gtest.h>

namespace k8s4r::kube_sim {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const json kWidgetCrd = json::parse(R"({
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "widgets.example.com"},
  "spec": {"group": "example.com", "scope": "Namespaced",
    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
    "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "required": ["size"], "properties": {"size": {"type": "integer"}}},
        "status": {"type": "object", "properties": {"state": {"type": "string"}}}}}}}]}})");

class StoreTest : public ::testing::Test {
 protected:
  StoreTest() : store_(StoreOptions{5, 1000}, [this] { return now_; }) {
    const Target crds{*store_.find_type("apiextensions.k8s.io", "v1", "customresourcedefinitions"), ""};
    EXPECT_EQ(store_.create(crds, kWidgetCrd, {}).code, 201);
    widgets_ = Target{*store_.find_type("example.com", "v1", "widgets"), "default"};
  }

  json widget(const std::string& name, int size, json labels = json::object()) {
    return {{"apiVersion", "example.com/v1"},
            {"kind", "Widget"},
            {"metadata", {{"name", name}, {"labels", labels}}},
            {"spec", {{"size", size}}}};
  }
  ApiResponse create(const std::string& name, int size = 1, json labels = json::object()) {
    return store_.create(widgets_, widget(name, size, labels), {});
  }
  std::vector<std::string> drain(Watcher& watcher) {
    std::vector<std::string> events;
    while (auto event = watcher.next(std::chrono::steady_clock::now())) {
      events.push_back(event->type + " " + event->object->value("metadata", json::object()).value("name", ""));
    }
    return events;
  }

  Timestamp now_ = parse_rfc3339("2026-11-22T00:00:00Z").value();
  Store store_;
  Target widgets_;
};

TEST_F(StoreTest, CreateSetsServerFieldsAndRefusesDuplicates) {
  ApiResponse created = create("a");
  ASSERT_EQ(created.code, 201);
  const json& metadata = created.body["metadata"];
  EXPECT_EQ(metadata["namespace"], "default");
  EXPECT_EQ(metadata["generation"], 1);
  EXPECT_EQ(metadata["creationTimestamp"], "2026-11-22T00:00:00Z");
  EXPECT_EQ(metadata["uid"].get<std::string>().size(), 36u);
  EXPECT_FALSE(metadata["resourceVersion"].get<std::string>().empty());

  ApiResponse again = create("a");
  EXPECT_EQ(again.code, 409);
  EXPECT_EQ(again.body["reason"], "AlreadyExists");
  EXPECT_EQ(again.body["message"], "widgets.example.com \"a\" already exists");
}

TEST_F(StoreTest, CreateValidatesAgainstTheCrdSchema) {
  json bad = widget("b", 1);
  bad["spec"] = {{"size", "big"}};
  ApiResponse refused = store_.create(widgets_, bad, {});
  EXPECT_EQ(refused.code, 422);
  EXPECT_EQ(refused.body["reason"], "Invalid");
  EXPECT_EQ(refused.body["details"]["causes"][0]["field"], "spec.size");

  bad["spec"] = json::object();
  refused = store_.create(widgets_, bad, {});
  EXPECT_EQ(refused.body["details"]["causes"][0]["field"], "spec.size");
  EXPECT_EQ(refused.body["details"]["causes"][0]["reason"], "FieldValueRequired");

  EXPECT_EQ(store_.create({widgets_.type, "nowhere"}, widget("c", 1), {}).code, 404);
}

TEST_F(StoreTest, StaleReplaceIsAConflict) {
  json object = create("a").body;
  json stale = object;
  object["spec"]["size"] = 2;
  ApiResponse replaced = store_.replace(widgets_, "a", object, false, {});
  ASSERT_EQ(replaced.code, 200);
  EXPECT_EQ(replaced.body["metadata"]["generation"], 2);

  stale["spec"]["size"] = 3;
  ApiResponse conflict = store_.replace(widgets_, "a", stale, false, {});
  EXPECT_EQ(conflict.code, 409);
  EXPECT_EQ(conflict.body["reason"], "Conflict");

  stale["metadata"].erase("resourceVersion");
  EXPECT_EQ(store_.replace(widgets_, "a", stale, false, {}).code, 422);
}

TEST_F(StoreTest, StatusSubresourceIsSeparateAndGenerationFollowsSpec) {
  json object = create("a").body;
  object["status"] = {{"state", "ignored"}};
  object["spec"]["size"] = 7;
  json updated = store_.replace(widgets_, "a", object, false, {}).body;
  EXPECT_FALSE(updated.contains("status"));
  EXPECT_EQ(updated["spec"]["size"], 7);
  EXPECT_EQ(updated["metadata"]["generation"], 2);

  ApiResponse status =
      store_.patch(widgets_, "a", PatchType::merge, R"({"status":{"state":"running"},"spec":{"size":100}})", true, {});
  ASSERT_EQ(status.code, 200);
  EXPECT_EQ(status.body["status"]["state"], "running");
  EXPECT_EQ(status.body["spec"]["size"], 7);
  EXPECT_EQ(status.body["metadata"]["generation"], 2);
}

TEST_F(StoreTest, NoOpUpdateKeepsTheResourceVersion) {
  json object = create("a").body;
  ApiResponse same = store_.patch(widgets_, "a", PatchType::merge, R"({"spec":{"size":1}})", false, {});
  EXPECT_EQ(same.body["metadata"]["resourceVersion"], object["metadata"]["resourceVersion"]);
}

TEST_F(StoreTest, FinalizersHoldDeletionUntilRemoved) {
  create("a");
  store_.patch(widgets_, "a", PatchType::merge, R"({"metadata":{"finalizers":["example.com/cleanup"]}})", false, {});
  ApiResponse deleting = store_.remove(widgets_, "a", json::object());
  ASSERT_EQ(deleting.code, 200);
  EXPECT_EQ(deleting.body["metadata"]["deletionTimestamp"], "2026-11-22T00:00:00Z");
  EXPECT_EQ(store_.get(widgets_, "a").code, 200);
  EXPECT_EQ(store_
                .patch(widgets_, "a", PatchType::json,
                       R"([{"op":"add","path":"/metadata/finalizers/-","value":"new"}])", false, {})
                .code,
            422);
  EXPECT_EQ(
      store_.patch(widgets_, "a", PatchType::json, R"([{"op":"remove","path":"/metadata/finalizers"}])", false, {})
          .code,
      200);
  EXPECT_EQ(store_.get(widgets_, "a").code, 404);
}

TEST_F(StoreTest, WatchReplaysTheWindowAndExpiresOlderVersions) {
  const std::string start = create("a").body["metadata"]["resourceVersion"];
  create("b");
  ApiResponse error;
  auto watcher = store_.watch(widgets_, {"", "", start, false, false}, error);
  ASSERT_TRUE(watcher);
  EXPECT_EQ(drain(*watcher), (std::vector<std::string>{"ADDED b"}));
  store_.remove(widgets_, "a", json::object());
  EXPECT_EQ(drain(*watcher), (std::vector<std::string>{"DELETED a"}));

  for (int i = 0; i < 6; ++i) create("c" + std::to_string(i));  // the window holds 5 events
  auto expired = store_.watch(widgets_, {"", "", start, false, false}, error);
  auto event = expired->next(std::chrono::steady_clock::now());
  ASSERT_TRUE(event);
  EXPECT_EQ(event->type, "ERROR");
  EXPECT_EQ((*event->object)["code"], 410);
  EXPECT_EQ((*event->object)["reason"], "Expired");
  EXPECT_EQ((*event->object)["message"].get<std::string>().rfind("too old resource version: " + start, 0), 0u);
  EXPECT_TRUE(expired->closed());
}

TEST_F(StoreTest, WatchWithoutVersionStartsWithCurrentObjects) {
  create("a");
  ApiResponse error;
  auto watcher = store_.watch(widgets_, {"", "", "", std::nullopt, false}, error);
  EXPECT_EQ(drain(*watcher), (std::vector<std::string>{"ADDED a"}));
}

TEST_F(StoreTest, SelectorWatchSeesObjectsEnterAndLeave) {
  create("a", 1, {{"env", "dev"}});
  ApiResponse error;
  auto watcher = store_.watch(
      widgets_, {"env=prod", "", store_.list(widgets_, {}).body["metadata"]["resourceVersion"], std::nullopt, false},
      error);
  store_.patch(widgets_, "a", PatchType::merge, R"({"metadata":{"labels":{"env":"prod"}}})", false, {});
  store_.patch(widgets_, "a", PatchType::merge, R"({"spec":{"size":2}})", false, {});
  store_.patch(widgets_, "a", PatchType::merge, R"({"metadata":{"labels":{"env":"dev"}}})", false, {});
  EXPECT_EQ(drain(*watcher), (std::vector<std::string>{"ADDED a", "MODIFIED a", "DELETED a"}));
}

TEST_F(StoreTest, ListsAtAnExactPastVersionAndInPages) {
  create("a");
  const std::string before = create("b").body["metadata"]["resourceVersion"];
  create("c");
  ListOptions exact;
  exact.resource_version = before;
  exact.resource_version_match = "Exact";
  ApiResponse past = store_.list(widgets_, exact);
  ASSERT_EQ(past.code, 200);
  EXPECT_EQ(past.body["items"].size(), 2u);
  EXPECT_EQ(past.body["metadata"]["resourceVersion"], before);

  ListOptions page;
  page.limit = 2;
  ApiResponse first = store_.list(widgets_, page);
  ASSERT_EQ(first.body["items"].size(), 2u);
  EXPECT_EQ(first.body["metadata"]["remainingItemCount"], 1);
  page.continue_token = first.body["metadata"]["continue"];
  create("d");  // not in the paged, consistent list
  ApiResponse second = store_.list(widgets_, page);
  ASSERT_EQ(second.body["items"].size(), 1u);
  EXPECT_EQ(second.body["items"][0]["metadata"]["name"], "c");

  store_.compact();
  EXPECT_EQ(store_.list(widgets_, exact).code, 410);
}

TEST_F(StoreTest, DeletingAnOwnerCollectsItsDependents) {
  const json owner = create("owner").body;
  json dependent = widget("dependent", 1);
  dependent["metadata"]["ownerReferences"] = {
      {{"apiVersion", "example.com/v1"}, {"kind", "Widget"}, {"name", "owner"}, {"uid", owner["metadata"]["uid"]}}};
  ASSERT_EQ(store_.create(widgets_, dependent, {}).code, 201);
  store_.remove(widgets_, "owner", json::object());
  EXPECT_EQ(store_.get(widgets_, "dependent").code, 404);
}

TEST_F(StoreTest, OrphanPropagationKeepsDependents) {
  const json owner = create("owner").body;
  json dependent = widget("dependent", 1);
  dependent["metadata"]["ownerReferences"] = {
      {{"apiVersion", "example.com/v1"}, {"kind", "Widget"}, {"name", "owner"}, {"uid", owner["metadata"]["uid"]}}};
  store_.create(widgets_, dependent, {});
  store_.remove(widgets_, "owner", {{"propagationPolicy", "Orphan"}});
  ApiResponse kept = store_.get(widgets_, "dependent");
  ASSERT_EQ(kept.code, 200);
  EXPECT_FALSE(kept.body["metadata"].contains("ownerReferences"));
}

TEST_F(StoreTest, DeletingTheCrdRemovesItsResources) {
  create("a");
  const Target crds{*store_.find_type("apiextensions.k8s.io", "v1", "customresourcedefinitions"), ""};
  EXPECT_EQ(store_.remove(crds, "widgets.example.com", json::object()).code, 200);
  EXPECT_FALSE(store_.find_type("example.com", "v1", "widgets"));
}

}  // namespace
}  // namespace k8s4r::kube_sim
