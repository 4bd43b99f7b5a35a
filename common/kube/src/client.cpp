#include "k8s4r/kube/client.h"

#include <algorithm>
#include <thread>

namespace k8s4r::kube {

using nlohmann::json;

namespace {

std::string url_encode(const std::string& text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char raw : text) {
    const auto c = static_cast<unsigned char>(raw);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// Appends `key=value` to a query when value is not empty.
void add_query(std::string& query, const char* key, const std::string& value) {
  if (value.empty()) return;
  query += query.empty() ? "?" : "&";
  query += key;
  query += "=";
  query += url_encode(value);
}

bool retriable(long status) { return status == 429 || (status >= 500 && status <= 504); }

}  // namespace

std::string ApiError::to_string() const {
  std::string text = std::to_string(code);
  if (!reason.empty()) text += " " + reason;
  if (!message.empty()) text += ": " + message;
  return text;
}

std::string Resource::path(const std::string& namespace_, const std::string& name,
                           const std::string& subresource) const {
  std::string path = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
  if (namespaced && !namespace_.empty()) path += "/namespaces/" + namespace_;
  path += "/" + plural;
  if (!name.empty()) path += "/" + name;
  if (!subresource.empty()) path += "/" + subresource;
  return path;
}

ApiError error_from_response(const HttpResponse& response) {
  const json body = json::parse(response.body, nullptr, false);
  if (body.is_object() && body.value("kind", "") == "Status") {
    return ApiError{static_cast<int>(response.status), body.value("reason", ""), body.value("message", "")};
  }
  std::string text = response.body.substr(0, 200);
  return ApiError{static_cast<int>(response.status), "", text};
}

Client::Client(ClientConfig config, std::unique_ptr<Transport> transport, Sleep sleep)
    : config_(std::move(config)), transport_(std::move(transport)), sleep_(std::move(sleep)) {
  if (!sleep_) sleep_ = [](std::chrono::milliseconds duration) { std::this_thread::sleep_for(duration); };
  tokens_ = config_.burst > 0 ? config_.burst : 1;
  refilled_ = std::chrono::steady_clock::now();
}

Client::Client(ClientConfig config) : Client(config, make_curl_transport(config)) {}

ClientStats Client::stats() const { return {requests_.load(), retries_.load()}; }

void Client::wait_for_token() {
  if (config_.qps <= 0) return;
  std::chrono::milliseconds wait{0};
  {
    std::lock_guard lock(limiter_mutex_);
    const auto now = std::chrono::steady_clock::now();
    const double burst = std::max(1, config_.burst);
    tokens_ = std::min(burst, tokens_ + std::chrono::duration<double>(now - refilled_).count() * config_.qps);
    refilled_ = now;
    tokens_ -= 1;  // may go negative: the debt is the wait
    if (tokens_ < 0) wait = std::chrono::milliseconds(static_cast<long long>(-tokens_ / config_.qps * 1000));
  }
  if (wait.count() > 0) sleep_(wait);
}

ApiResult<HttpResponse> Client::execute(const HttpRequest& request,
                                        const std::function<Result<HttpResponse>(const HttpRequest&)>& perform,
                                        const std::function<bool()>& may_retry) {
  const bool idempotent = request.method != "POST";
  std::chrono::milliseconds backoff{100};
  const auto cancelled = [&] { return request.cancel && request.cancel->load(); };
  for (int attempt = 1;; ++attempt) {
    wait_for_token();
    if (cancelled()) return ApiError{0, "Cancelled", request.method + " " + request.path + ": cancelled"};
    ++requests_;
    auto response = perform(request);
    if (cancelled()) return ApiError{0, "Cancelled", request.method + " " + request.path + ": cancelled"};
    const bool last = attempt >= std::max(1, config_.max_attempts) || (may_retry && !may_retry());
    if (!response) {
      // "connect": the request never left, so even a POST may go again.
      const bool retry = idempotent || response.error().field == "connect";
      if (last || !retry) return ApiError{0, "ConnectionError", response.error().message};
    } else {
      const long status = response.value().status;
      const bool retry = retriable(status) && (idempotent || status == 429 || !response.value().retry_after.empty());
      if (!retry || last) return std::move(response).value();
    }
    std::chrono::milliseconds wait = backoff;
    if (response && !response.value().retry_after.empty()) {
      try {
        wait = std::chrono::seconds(std::stoll(response.value().retry_after));
      } catch (...) {
      }
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
    ++retries_;
    if (!request.cancel) {
      sleep_(wait);
      continue;
    }
    // In slices, so a cancel is noticed within 100 ms of the backoff.
    for (auto left = wait; left.count() > 0 && !cancelled(); left -= std::chrono::milliseconds(100)) {
      sleep_(std::min(left, std::chrono::milliseconds(100)));
    }
  }
}

ApiResult<json> Client::call(const std::string& method, const std::string& path, const std::string& body,
                             const std::string& content_type, const std::atomic<bool>* cancel) {
  auto response = execute({method, path, body, content_type, cancel},
                          [this](const HttpRequest& request) { return transport_->send(request); });
  if (!response) return response.error();
  if (response.value().status < 200 || response.value().status >= 300) return error_from_response(response.value());
  json parsed = json::parse(response.value().body, nullptr, false);
  if (parsed.is_discarded())
    return ApiError{static_cast<int>(response.value().status), "InvalidResponse", "the response is not JSON"};
  return parsed;
}

ApiResult<json> Client::get(const Resource& resource, const std::string& namespace_, const std::string& name) {
  return call("GET", resource.path(namespace_, name));
}

ApiResult<json> Client::list(const Resource& resource, const std::string& namespace_, const ListOptions& options) {
  std::string query;
  add_query(query, "labelSelector", options.label_selector);
  add_query(query, "fieldSelector", options.field_selector);
  add_query(query, "resourceVersion", options.resource_version);
  add_query(query, "resourceVersionMatch", options.resource_version_match);
  add_query(query, "limit", options.limit > 0 ? std::to_string(options.limit) : "");
  add_query(query, "continue", options.continue_token);
  return call("GET", resource.path(namespace_) + query, "", "", options.cancel);
}

ApiResult<json> Client::list_all(const Resource& resource, const std::string& namespace_, ListOptions options) {
  json merged;
  while (true) {
    auto page = list(resource, namespace_, options);
    if (!page) return page.error();
    const std::string next = page.value().value("metadata", json::object()).value("continue", "");
    if (merged.is_null()) {
      merged = std::move(page).value();
    } else {
      for (auto& item : page.value()["items"]) merged["items"].push_back(std::move(item));
    }
    if (next.empty()) break;
    options.continue_token = next;
    options.resource_version.clear();  // the token pins the version
    options.resource_version_match.clear();
  }
  if (merged.contains("metadata")) merged["metadata"].erase("continue");
  return merged;
}

ApiResult<json> Client::create(const Resource& resource, const std::string& namespace_, const json& object) {
  return call("POST", resource.path(namespace_), object.dump(), "application/json");
}

ApiResult<json> Client::replace(const Resource& resource, const std::string& namespace_, const std::string& name,
                                const json& object, bool status) {
  return call("PUT", resource.path(namespace_, name, status ? "status" : ""), object.dump(), "application/json");
}

ApiResult<json> Client::merge_patch(const Resource& resource, const std::string& namespace_, const std::string& name,
                                    const json& patch, bool status) {
  return call("PATCH", resource.path(namespace_, name, status ? "status" : ""), patch.dump(),
              "application/merge-patch+json");
}

ApiResult<json> Client::json_patch(const Resource& resource, const std::string& namespace_, const std::string& name,
                                   const json& operations, bool status) {
  return call("PATCH", resource.path(namespace_, name, status ? "status" : ""), operations.dump(),
              "application/json-patch+json");
}

ApiResult<json> Client::remove(const Resource& resource, const std::string& namespace_, const std::string& name,
                               const json& delete_options) {
  return call("DELETE", resource.path(namespace_, name), delete_options.dump(), "application/json");
}

ApiResult<void> Client::watch(const Resource& resource, const std::string& namespace_, const WatchOptions& options,
                              const std::function<bool(const WatchEvent&)>& on_event, const std::atomic<bool>& cancel) {
  std::string query = "?watch=1";
  add_query(query, "labelSelector", options.label_selector);
  add_query(query, "fieldSelector", options.field_selector);
  add_query(query, "resourceVersion", options.resource_version);
  if (options.allow_bookmarks) query += "&allowWatchBookmarks=true";
  if (options.timeout_seconds > 0) query += "&timeoutSeconds=" + std::to_string(options.timeout_seconds);
  std::string bad_line;
  const auto on_line = [&](std::string_view line) {
    json event = json::parse(line, nullptr, false);
    if (!event.is_object() || !event.contains("type") || !event["type"].is_string() || !event.contains("object")) {
      bad_line = std::string(line.substr(0, 200));
      return false;
    }
    return on_event(WatchEvent{event["type"].get<std::string>(), std::move(event["object"])});
  };
  // Once events arrived, a broken stream is not sent again from the same
  // resourceVersion (they would arrive twice): the caller resumes from the last
  // one it saw.
  bool delivered = false;
  const auto counting_on_line = [&](std::string_view line) {
    delivered = true;
    return on_line(line);
  };
  auto response = execute(
      {"GET", resource.path(namespace_) + query, "", "", nullptr},
      [&](const HttpRequest& request) { return transport_->stream(request, counting_on_line, cancel); },
      [&] { return !delivered && !cancel; });
  if (!response) return response.error();
  if (response.value().status != 200) return error_from_response(response.value());
  if (!bad_line.empty()) return ApiError{200, "InvalidResponse", "not a watch event: " + bad_line};
  return boost::outcome_v2::success();
}

}  // namespace k8s4r::kube
