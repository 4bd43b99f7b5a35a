#include "k8s4r/bridge/kube_writer.h"

#include "k8s4r/crd/resources.h"

#include <spdlog/spdlog.h>

namespace k8s4r::bridge {

using nlohmann::json;

namespace {

// A Task's writes go before Robots' and Events: a dispatch or a report waits
// on them, a heartbeat time does not.
kube::WorkQueueOptions task_writes_first(kube::WorkQueueOptions options) {
  options.urgent = [prefix = crd::kTasks.plural + "/"](const std::string& key) { return key.starts_with(prefix); };
  return options;
}

}  // namespace

KubeWriter::KubeWriter(kube::Client& client, CacheLookup lookup, daemon::Metrics& metrics, std::size_t threads,
                       kube::WorkQueueOptions retry)
    : client_(client), lookup_(std::move(lookup)), metrics_(metrics), queue_(task_writes_first(std::move(retry))) {
  metrics_.declare("k8s4r_bridge_kube_writes_total", daemon::Metrics::Type::counter,
                   "Kubernetes API writes by verb and HTTP status code (0: no answer).");
  metrics_.declare("k8s4r_bridge_kube_writes_dropped_total", daemon::Metrics::Type::counter,
                   "Writes given up: the object is gone, or the server refused the write for good.");
  for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

KubeWriter::~KubeWriter() { stop(); }

void KubeWriter::stop() {
  queue_.shut_down();
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

void KubeWriter::merge(Pending& older, Pending newer) {
  const auto compose = [](PackedJson& first, PackedJson&& then) {
    if (then.empty()) return;
    first = first.empty() ? std::move(then) : PackedJson(crd::compose_merge_patches(first.get(), then.get()));
  };
  if (!newer.create.empty()) {
    older.create = std::move(newer.create);
    older.must_be_new = newer.must_be_new;
    older.exists_patch = std::move(newer.exists_patch);
  }
  compose(older.main_patch, std::move(newer.main_patch));
  if (newer.finalizer) older.finalizer = newer.finalizer;
  compose(older.status_patch, std::move(newer.status_patch));
  for (auto& done : newer.done) older.done.push_back(std::move(done));
}

void KubeWriter::write(const ObjectRef& object, WriteRequest request) {
  Pending pending{object,
                  request.create ? PackedJson(*request.create) : PackedJson(),
                  request.must_be_new,
                  PackedJson(request.exists_patch),
                  PackedJson(request.main_patch),
                  request.finalizer,
                  PackedJson(request.status_patch),
                  {},
                  false};
  if (request.done) pending.done.push_back(std::move(request.done));
  const std::string key = object.key();
  {
    std::lock_guard lock(mutex_);
    auto found = pending_.find(key);
    if (found == pending_.end()) {
      pending_.emplace(key, std::move(pending));
    } else {
      merge(found->second, std::move(pending));
    }
  }
  queue_.add(key);
}

void KubeWriter::create_event(const json& event) {
  ObjectRef ref{crd::kEvents, event["metadata"].value("namespace", ""), event["metadata"].value("name", "")};
  Pending pending{ref, PackedJson(event), false, {}, {}, std::nullopt, {}, {}, true};
  const std::string key = "event:" + ref.key();
  {
    std::lock_guard lock(mutex_);
    pending_.emplace(key, std::move(pending));  // the same Event twice: once is enough
  }
  queue_.add(key);
}

void KubeWriter::count(const std::string& verb, int code) {
  metrics_.add("k8s4r_bridge_kube_writes_total", {{"verb", verb}, {"code", std::to_string(code)}});
}

namespace {

// Gone (404), or refused for what it says (400, 403, 422): retrying would
// change nothing. Conflicts, 429, server trouble and no answer are retried.
bool refused_for_good(const kube::ApiError& error) {
  return error.not_found() || error.code == 400 || error.code == 403 || error.code == 422;
}

}  // namespace

bool KubeWriter::execute(Pending& pending, std::string& error, bool& permanent) {
  const ObjectRef& ref = pending.object;
  const auto failed = [&](const kube::ApiError& api_error) {
    error = api_error.to_string();
    permanent = refused_for_good(api_error);
    return false;
  };
  if (!pending.create.empty()) {
    auto created = client_.create(ref.resource, ref.namespace_, pending.create.get());
    count("create", created ? 201 : created.error().code);
    if (!created && !created.error().already_exists()) return failed(created.error());
    if (!created && pending.must_be_new) {
      if (!pending.exists_patch.empty()) {
        auto patched = client_.merge_patch(ref.resource, ref.namespace_, ref.name, pending.exists_patch.get());
        count("patch", patched ? 200 : patched.error().code);
      }
      error = ref.key() + " exists, but this bridge's cache does not hold it (not yet, or it had no slot label)";
      permanent = true;
      return false;
    }
    pending.create.clear();
  }
  if (!pending.main_patch.empty()) {
    auto patched = client_.merge_patch(ref.resource, ref.namespace_, ref.name, pending.main_patch.get());
    count("patch", patched ? 200 : patched.error().code);
    if (!patched) return failed(patched.error());
    pending.main_patch.clear();
  }
  const auto finalizer_step = [&]() -> bool {
    if (!pending.finalizer) return true;
    const kube::ObjectPtr cached = lookup_(ref);
    if (!cached) {
      error = "not in the cache";
      permanent = true;  // deleted: nothing to hold or release
      return false;
    }
    const json patch = *pending.finalizer ? crd::add_finalizer_patch(*cached, crd::kBridgeFinalizer)
                                          : crd::remove_finalizer_patch(*cached, crd::kBridgeFinalizer);
    const bool has = crd::read_task(*cached).has_bridge_finalizer;
    if (!patch.is_null() && has != *pending.finalizer) {
      auto patched = client_.json_patch(ref.resource, ref.namespace_, ref.name, patch);
      count("patch", patched ? 200 : patched.error().code);
      if (!patched) {
        // A failed test: the cache was behind. It catches up; try again.
        if (patched.error().code == 422 || patched.error().conflict()) {
          error = patched.error().to_string();
          permanent = false;
          return false;
        }
        if (patched.error().not_found() && !*pending.finalizer) {
          pending.finalizer.reset();  // gone already: released
        } else {
          return failed(patched.error());
        }
      }
    }
    pending.finalizer.reset();
    return true;
  };
  // A finalizer is added before the status that says the task was sent,
  // and removed only after the last status is in, so the Task's final state
  // is recorded before it goes.
  if (pending.finalizer == true && !finalizer_step()) return false;
  if (!pending.status_patch.empty()) {
    auto patched = client_.merge_patch(ref.resource, ref.namespace_, ref.name, pending.status_patch.get(), true);
    count("patch_status", patched ? 200 : patched.error().code);
    if (!patched) {
      // A status the server refuses must not hold a Task being deleted:
      // it is dropped (and counted) and the release goes ahead.
      const bool release_waits =
          pending.finalizer == false && refused_for_good(patched.error()) && !patched.error().not_found();
      if (!release_waits) return failed(patched.error());
      metrics_.add("k8s4r_bridge_kube_writes_dropped_total");
      spdlog::warn("status of {} dropped, releasing it all the same: {}", ref.key(), patched.error().to_string());
    }
    pending.status_patch.clear();
  }
  return finalizer_step();
}

void KubeWriter::run() {
  while (auto key = queue_.get()) {
    Pending pending;
    {
      std::lock_guard lock(mutex_);
      auto found = pending_.find(*key);
      if (found == pending_.end()) {
        queue_.done(*key);
        continue;
      }
      pending = std::move(found->second);
      pending_.erase(found);
      in_flight_.emplace(*key, pending.object);
    }
    std::string error;
    bool permanent = false;
    bool ok = false;
    if (pending.is_event) {
      auto created = client_.create(crd::kEvents, pending.object.namespace_, pending.create.get());
      count("create_event", created ? 201 : created.error().code);
      ok = created || created.error().already_exists();
      if (!ok) {
        error = created.error().to_string();
        permanent = refused_for_good(created.error());
      }
    } else {
      ok = execute(pending, error, permanent);
    }
    if (ok || permanent) {
      if (!ok) {
        metrics_.add("k8s4r_bridge_kube_writes_dropped_total");
        spdlog::log(error.find("404") == 0 ? spdlog::level::info : spdlog::level::warn, "write to {} given up: {}",
                    *key, error);
      }
      queue_.forget(*key);
      for (auto& done : pending.done) done(ok, error);
    } else {
      spdlog::debug("write to {} failed, will retry: {}", *key, error);
      {
        std::lock_guard lock(mutex_);
        auto found = pending_.find(*key);
        if (found == pending_.end()) {
          pending_.emplace(*key, std::move(pending));
        } else {
          // What arrived meanwhile is newer: it goes on top.
          Pending newer = std::move(found->second);
          merge(pending, std::move(newer));
          found->second = std::move(pending);
        }
      }
      queue_.add_rate_limited(*key);
    }
    {
      std::lock_guard lock(mutex_);
      in_flight_.erase(*key);
    }
    queue_.done(*key);
  }
}

bool KubeWriter::any_pending(const std::function<bool(const ObjectRef&)>& matches) const {
  std::lock_guard lock(mutex_);
  for (const auto& [key, pending] : pending_)
    if (!pending.is_event && matches(pending.object)) return true;
  for (const auto& [key, object] : in_flight_)
    if (matches(object)) return true;
  return false;
}

std::size_t KubeWriter::waiting_callbacks() const {
  std::lock_guard lock(mutex_);
  std::size_t count = 0;
  for (const auto& [key, pending] : pending_) count += pending.done.size();
  return count;
}

}  // namespace k8s4r::bridge
