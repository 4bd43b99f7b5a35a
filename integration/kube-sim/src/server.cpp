#include "k8s4r/kube_sim/server.h"

#include "k8s4r/kube_sim/discovery.h"
#include "k8s4r/kube_sim/table.h"

#include "protobuf.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

namespace k8s4r::kube_sim {

using nlohmann::json;
using Steady = std::chrono::steady_clock;

namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> segments;
  std::size_t start = 0;
  while (start < path.size()) {
    std::size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) segments.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return segments;
}

std::string param(const httplib::Request& request, const char* name) {
  return request.has_param(name) ? request.get_param_value(name) : "";
}

bool truthy(const std::string& value) { return value == "1" || value == "true" || value == "True"; }

// `Warning: 299 - "text"`, as kube-apiserver sends them.
std::string warning_header(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return "299 - \"" + escaped + "\"";
}

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

void respond(httplib::Response& response, const ApiResponse& api) {
  response.status = api.code;
  for (const std::string& warning : api.warnings) response.headers.emplace("Warning", warning_header(warning));
  response.set_content(dump(api.body), "application/json");
}

bool wants_table(const httplib::Request& request) {
  const std::string accept = request.get_header_value("Accept");
  return accept.find("as=Table") != std::string::npos;
}

IncludeObject include_object(const httplib::Request& request) {
  const std::string value = param(request, "includeObject");
  if (value == "None") return IncludeObject::none;
  if (value == "Object") return IncludeObject::object;
  return IncludeObject::metadata;
}

}  // namespace

struct Server::Impl {
  Store& store;
  ServerOptions options;
  std::unique_ptr<httplib::Server> http;
  std::thread thread;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::mutex faults_mutex;
  std::condition_variable unpaused;
  Faults faults;

  Impl(Store& s, ServerOptions o) : store(s), options(std::move(o)), faults(options.faults) {}

  std::string url() const {
    return std::string(options.tls_cert_file.empty() ? "http" : "https") + "://" + options.host + ":" +
           std::to_string(port);
  }

  // ---- request pipeline ------------------------------------------------------------

  void serve(const std::string& method, const httplib::Request& request, httplib::Response& response) {
    const std::string& path = request.path;
    if (options.log_requests) {
      std::string query;
      for (const auto& [key, value] : request.params) query += (query.empty() ? "?" : "&") + key + "=" + value;
      spdlog::info("{} {}{} accept={}", method, path, query, request.get_header_value("Accept"));
    }
    const bool anonymous = path == "/version" || path == "/healthz" || path == "/livez" || path == "/readyz";
    if (!anonymous && !options.token.empty() &&
        request.get_header_value("Authorization") != "Bearer " + options.token) {
      respond(response, unauthorized());
      return;
    }
    if (path.rfind("/_sim/", 0) == 0) {
      admin(method, request, response);
      return;
    }
    if (!anonymous && inject_fault(response)) return;
    if (path == "/version") return respond(response, {200, version_info(), {}});
    if (anonymous) {
      response.set_content("ok", "text/plain");
      return;
    }
    route(method, request, response);
  }

  // Waits while paused, adds latency, and answers a share of requests with
  // the configured error. True when the request was answered.
  bool inject_fault(httplib::Response& response) {
    Faults now;
    {
      std::unique_lock lock(faults_mutex);
      unpaused.wait(lock, [this] { return !faults.paused || stopping; });
      now = faults;
    }
    if (now.latency.count() > 0) std::this_thread::sleep_for(now.latency);
    if (now.error_rate <= 0) return false;
    thread_local std::mt19937 random{std::random_device{}()};
    if (std::uniform_real_distribution<double>(0, 1)(random) >= now.error_rate) return false;
    if (now.error_code == 429) {
      response.set_header("Retry-After", std::to_string(now.retry_after_seconds));
      respond(response, {429,
                         status_body(429, "TooManyRequests",
                                     "the server has received too many requests and has asked us to try again later "
                                     "(injected by k8s4r-kube-sim)",
                                     json{{"retryAfterSeconds", now.retry_after_seconds}}),
                         {}});
    } else {
      respond(response,
              {now.error_code,
               status_body(now.error_code, "InternalError", "Internal error occurred: injected by k8s4r-kube-sim"),
               {}});
    }
    return true;
  }

  void admin(const std::string& method, const httplib::Request& request, httplib::Response& response) {
    const std::string& path = request.path;
    if (method == "GET" && path == "/_sim/stats") {
      json body = store.stats();
      std::lock_guard lock(faults_mutex);
      body["faults"] = {{"latencyMs", faults.latency.count()},
                        {"errorRate", faults.error_rate},
                        {"errorCode", faults.error_code},
                        {"retryAfterSeconds", faults.retry_after_seconds},
                        {"paused", faults.paused}};
      return respond(response, {200, body, {}});
    }
    if (method != "POST") return respond(response, method_not_allowed("admin endpoints take POST"));
    if (path == "/_sim/faults") {
      const json body = json::parse(request.body.empty() ? "{}" : request.body, nullptr, false);
      if (!body.is_object()) return respond(response, bad_request("faults: body must be a JSON object"));
      {
        std::lock_guard lock(faults_mutex);
        if (body.contains("latencyMs")) faults.latency = std::chrono::milliseconds(body["latencyMs"].get<long long>());
        if (body.contains("errorRate")) faults.error_rate = body["errorRate"].get<double>();
        if (body.contains("errorCode")) faults.error_code = body["errorCode"].get<int>();
        if (body.contains("retryAfterSeconds")) faults.retry_after_seconds = body["retryAfterSeconds"].get<int>();
        if (body.contains("paused")) faults.paused = body["paused"].get<bool>();
      }
      if (body.contains("dropWatchEvents")) store.drop_watch_events(body["dropWatchEvents"].get<std::uint64_t>());
      unpaused.notify_all();
      return respond(response, {200, json{{"ok", true}}, {}});
    }
    if (path == "/_sim/close-watches") {
      store.close_all_watches();
      return respond(response, {200, json{{"ok", true}}, {}});
    }
    if (path == "/_sim/compact") {
      store.compact();
      return respond(response, {200, json{{"ok", true}, {"resourceVersion", store.resource_version()}}, {}});
    }
    respond(response, not_found_path(path));
  }

  // ---- REST routing ---------------------------------------------------------------------

  void route(const std::string& method, const httplib::Request& request, httplib::Response& response) {
    std::vector<std::string> segments = split_path(request.path);
    const auto types = [this] { return store.served_types(); };
    if (segments.empty())
      return respond(response, {200, json{{"paths", {"/api", "/api/v1", "/apis", "/openapi/v3", "/version"}}}, {}});
    if (segments[0] == "openapi") {
      if (segments.size() == 2 && segments[1] == "v3") return respond(response, {200, openapi_v3_root(types()), {}});
      if (segments.size() >= 3 && segments[1] == "v3") {
        std::string rest;
        for (std::size_t i = 2; i < segments.size(); ++i) rest += (rest.empty() ? "" : "/") + segments[i];
        auto document = openapi_v3_document(types(), rest);
        if (document) return respond(response, {200, *document, {}});
      }
      return respond(response, not_found_path(request.path));
    }
    std::string group, version;
    std::size_t next = 0;
    if (segments[0] == "api") {
      if (segments.size() == 1)
        return respond(response, {200, api_versions(options.host + ":" + std::to_string(port)), {}});
      version = segments[1];
      next = 2;
    } else if (segments[0] == "apis") {
      if (segments.size() == 1) return respond(response, {200, api_group_list(types()), {}});
      group = segments[1];
      if (segments.size() == 2) {
        auto found = api_group(types(), group);
        return respond(response, found ? ApiResponse{200, *found, {}} : not_found_path(request.path));
      }
      version = segments[2];
      next = 3;
    } else {
      return respond(response, not_found_path(request.path));
    }
    if (segments.size() == next) {
      auto found = api_resource_list(types(), group, version);
      return respond(response, found ? ApiResponse{200, *found, {}} : not_found_path(request.path));
    }
    std::vector<std::string> rest(segments.begin() + static_cast<long>(next), segments.end());
    bool watch_path = false;
    if (rest[0] == "watch") {  // the deprecated /watch/ prefix
      watch_path = true;
      rest.erase(rest.begin());
      if (rest.empty()) return respond(response, not_found_path(request.path));
    }
    std::string namespace_;
    if (rest[0] == "namespaces" && rest.size() >= 3 &&
        !(group.empty() && rest.size() == 3 && (rest[2] == "status" || rest[2] == "finalize"))) {
      namespace_ = rest[1];
      rest.erase(rest.begin(), rest.begin() + 2);
    }
    if (rest.size() > 3) return respond(response, not_found_path(request.path));
    auto type = store.find_type(group, version, rest[0]);
    if (!type || (!type->namespaced && !namespace_.empty())) return respond(response, not_found_path(request.path));
    const std::string name = rest.size() > 1 ? rest[1] : "";
    const std::string subresource = rest.size() > 2 ? rest[2] : "";
    if (!subresource.empty() && !(subresource == "status" && type->status_subresource)) {
      return respond(response, not_found_path(request.path));
    }
    const bool status = subresource == "status";
    Target target{*type, namespace_};

    WriteOptions write;
    write.dry_run = param(request, "dryRun") == "All";
    write.field_validation = param(request, "fieldValidation");

    if (method == "GET") {
      if (watch_path || truthy(param(request, "watch"))) return watch(target, name, request, response);
      if (!name.empty()) {
        ApiResponse got = store.get(target, name);
        if (got.ok() && wants_table(request)) {
          got.body = to_table(*type, {got.body}, got.body["metadata"].value("resourceVersion", ""), "", now(),
                              include_object(request));
        }
        return respond(response, got);
      }
      ApiResponse listed = store.list(target, list_options(request));
      if (listed.ok() && wants_table(request)) {
        std::vector<json> items(listed.body["items"].begin(), listed.body["items"].end());
        listed.body = to_table(*type, items, listed.body["metadata"].value("resourceVersion", ""),
                               listed.body["metadata"].value("continue", ""), now(), include_object(request));
      }
      return respond(response, listed);
    }
    if (method == "POST") {
      if (!name.empty()) return respond(response, method_not_allowed("POST is not supported on a named resource"));
      auto body = parse_body(request, response);
      if (!body) return;
      return respond(response, store.create(target, std::move(*body), write));
    }
    if (method == "PUT") {
      if (name.empty()) return respond(response, method_not_allowed("PUT needs a resource name"));
      auto body = parse_body(request, response);
      if (!body) return;
      return respond(response, store.replace(target, name, std::move(*body), status, write));
    }
    if (method == "PATCH") {
      if (name.empty()) return respond(response, method_not_allowed("PATCH needs a resource name"));
      const std::string content_type = request.get_header_value("Content-Type");
      PatchType patch_type;
      if (content_type.rfind("application/merge-patch+json", 0) == 0) {
        patch_type = PatchType::merge;
      } else if (content_type.rfind("application/json-patch+json", 0) == 0) {
        patch_type = PatchType::json;
      } else if (content_type.rfind("application/strategic-merge-patch+json", 0) == 0) {
        patch_type = PatchType::strategic;
      } else if (content_type.rfind("application/apply-patch+yaml", 0) == 0) {
        patch_type = PatchType::apply;
      } else {
        return respond(response,
                       unsupported_media_type(
                           "the body of the request was in an unknown format - accepted media types include: "
                           "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"));
      }
      return respond(response, store.patch(target, name, patch_type, request.body, status, write));
    }
    if (method == "DELETE") {
      const bool json_body =
          request.get_header_value("Content-Type").rfind("application/vnd.kubernetes.protobuf", 0) != 0;
      json options_body =
          request.body.empty() || !json_body ? json::object() : json::parse(request.body, nullptr, false);
      if (options_body.is_discarded() || !options_body.is_object())
        return respond(response, bad_request("the body of a delete must be DeleteOptions"));
      if (!param(request, "propagationPolicy").empty())
        options_body["propagationPolicy"] = param(request, "propagationPolicy");
      if (write.dry_run) options_body["dryRun"] = {"All"};
      if (name.empty()) return respond(response, store.remove_collection(target, list_options(request), options_body));
      return respond(response, store.remove(target, name, options_body));
    }
    respond(response, method_not_allowed(method + " is not supported"));
  }

  static Timestamp now() {
    return std::chrono::time_point_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now());
  }

  static ListOptions list_options(const httplib::Request& request) {
    ListOptions options;
    options.label_selector = param(request, "labelSelector");
    options.field_selector = param(request, "fieldSelector");
    options.resource_version = param(request, "resourceVersion");
    options.resource_version_match = param(request, "resourceVersionMatch");
    options.continue_token = param(request, "continue");
    try {
      options.limit = param(request, "limit").empty() ? 0 : std::stoll(param(request, "limit"));
    } catch (...) {
      options.limit = 0;
    }
    return options;
  }

  std::optional<json> parse_body(const httplib::Request& request, httplib::Response& response) {
    const std::string content_type = request.get_header_value("Content-Type");
    if (content_type.rfind("application/vnd.kubernetes.protobuf", 0) == 0) {
      // kubectl's typed generators (create namespace) send protobuf.
      if (auto decoded = decode_protobuf_namespace(request.body)) return decoded;
      respond(response,
              unsupported_media_type("k8s4r-kube-sim reads protobuf only for Namespace; send application/json"));
      return std::nullopt;
    }
    if (!content_type.empty() && content_type.rfind("application/json", 0) != 0 && content_type.rfind("*/*", 0) != 0) {
      respond(response,
              unsupported_media_type(
                  "the body of the request was in an unknown format - accepted media types include: application/json"));
      return std::nullopt;
    }
    json body = json::parse(request.body, nullptr, false);
    if (body.is_discarded()) {
      respond(response, bad_request("the object provided is unrecognized: the body is not valid JSON"));
      return std::nullopt;
    }
    if (!body.is_object()) {
      respond(response, bad_request("the object provided is unrecognized: the body must be a JSON object"));
      return std::nullopt;
    }
    return body;
  }

  // ---- watch ------------------------------------------------------------------------------

  void watch(const Target& target, const std::string& name, const httplib::Request& request,
             httplib::Response& response) {
    WatchOptions watch_options;
    watch_options.label_selector = param(request, "labelSelector");
    watch_options.field_selector = param(request, "fieldSelector");
    if (!name.empty()) {  // GET .../name?watch=1 watches one object
      watch_options.field_selector +=
          (watch_options.field_selector.empty() ? "" : ",") + std::string("metadata.name=") + name;
    }
    watch_options.resource_version = param(request, "resourceVersion");
    watch_options.allow_bookmarks = truthy(param(request, "allowWatchBookmarks"));
    watch_options.send_initial_events = truthy(param(request, "sendInitialEvents"));
    ApiResponse error;
    auto watcher = store.watch(target, watch_options, error);
    if (!watcher) return respond(response, error);

    auto timeout = options.default_watch_timeout;
    if (const std::string seconds = param(request, "timeoutSeconds"); !seconds.empty()) {
      try {
        // Clamped, as a nonsense value must neither end the watch at once nor overflow.
        timeout = std::chrono::seconds(std::clamp(std::stoll(seconds), 1LL, 24LL * 3600));
      } catch (...) {
      }
    }
    const auto deadline = Steady::now() + timeout;
    const bool table = wants_table(request);
    const IncludeObject include = include_object(request);
    const bool bookmarks = watch_options.allow_bookmarks;
    const ResourceType type = target.type;
    auto first_table = std::make_shared<bool>(true);
    auto next_bookmark = std::make_shared<Steady::time_point>(Steady::now() + options.bookmark_interval);
    auto next_keepalive = std::make_shared<Steady::time_point>(Steady::now() + std::chrono::seconds(5));
    const auto bookmark_interval = options.bookmark_interval;

    response.status = 200;
    // The ";stream=watch" parameter also keeps cpp-httplib from gzipping the
    // stream, which would hold events back in the compressor's buffer.
    response.set_chunked_content_provider(
        "application/json;stream=watch",
        [this, watcher, deadline, table, include, bookmarks, type, first_table, next_bookmark, next_keepalive,
         bookmark_interval](std::size_t, httplib::DataSink& sink) {
          const auto encode = [&](const WatchEvent& event) {
            if (table && (event.type == "ADDED" || event.type == "MODIFIED" || event.type == "DELETED")) {
              const json object =
                  to_table(type, {*event.object}, (*event.object)["metadata"].value("resourceVersion", ""), "", now(),
                           include, *first_table);
              *first_table = false;
              return encode_watch_line(event.type, object);
            }
            return event.line ? *event.line : encode_watch_line(event.type, *event.object);
          };
          while (!stopping) {
            const auto now_steady = Steady::now();
            if (now_steady >= deadline) {
              sink.done();
              return true;
            }
            auto wake = std::min({deadline, *next_keepalive, bookmarks ? *next_bookmark : deadline});
            if (auto event = watcher->next(wake)) {
              const std::string line = encode(*event);
              if (!sink.write(line.data(), line.size())) return false;
              *next_keepalive = Steady::now() + std::chrono::seconds(5);
              if (event->type == "ERROR") {
                sink.done();
                return true;
              }
              continue;
            }
            if (watcher->closed()) {
              sink.done();
              return true;
            }
            const auto after = Steady::now();
            if (bookmarks && after >= *next_bookmark) {
              if (auto bookmark = store.bookmark(watcher)) {
                const std::string line = encode(*bookmark);
                if (!sink.write(line.data(), line.size())) return false;
              }
              *next_bookmark = after + bookmark_interval;
              *next_keepalive = after + std::chrono::seconds(5);
            } else if (after >= *next_keepalive) {
              // A bare newline: JSON stream readers skip it, and writing it
              // tells us when the client has gone away.
              if (!sink.write("\n", 1)) return false;
              *next_keepalive = after + std::chrono::seconds(5);
            }
          }
          sink.done();
          return true;
        },
        [this, watcher](bool) { store.unwatch(watcher); });
  }
};

Server::Server(Store& store, ServerOptions options) : impl_(std::make_unique<Impl>(store, std::move(options))) {}

Server::~Server() { stop(); }

bool Server::start() {
  Impl& impl = *impl_;
  if (impl.options.tls_cert_file.empty()) {
    impl.http = std::make_unique<httplib::Server>();
  } else {
    auto tls =
        std::make_unique<httplib::SSLServer>(impl.options.tls_cert_file.c_str(), impl.options.tls_key_file.c_str());
    if (!tls->is_valid()) {
      spdlog::error("cannot load the TLS certificate {} or key {}", impl.options.tls_cert_file,
                    impl.options.tls_key_file);
      return false;
    }
    impl.http = std::move(tls);
  }
  httplib::Server& http = *impl.http;
  const int threads = impl.options.threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  http.set_keep_alive_max_count(100000);
  http.set_keep_alive_timeout(5);
  http.set_read_timeout(30, 0);
  http.set_write_timeout(30, 0);
  http.set_tcp_nodelay(true);
  http.set_payload_max_length(3 * 1024 * 1024);  // kube-apiserver's request body limit
  for (const char* method : {"GET", "POST", "PUT", "PATCH", "DELETE"}) {
    const std::string name = method;
    const auto handler = [&impl, name](const httplib::Request& request, httplib::Response& response) {
      impl.serve(name, request, response);
    };
    if (name == "GET") http.Get(".*", handler);
    if (name == "POST") http.Post(".*", handler);
    if (name == "PUT") http.Put(".*", handler);
    if (name == "PATCH") http.Patch(".*", handler);
    if (name == "DELETE") http.Delete(".*", handler);
  }
  if (impl.options.port == 0) {
    impl.port = http.bind_to_any_port(impl.options.host);
  } else {
    impl.port = http.bind_to_port(impl.options.host, impl.options.port) ? impl.options.port : -1;
  }
  if (impl.port <= 0) {
    spdlog::error("cannot listen on {}:{}", impl.options.host, impl.options.port);
    return false;
  }
  impl.thread = std::thread([&http] { http.listen_after_bind(); });
  return true;
}

void Server::stop() {
  Impl& impl = *impl_;
  if (!impl.http) return;
  impl.stopping = true;
  impl.unpaused.notify_all();
  impl.store.close_all_watches();
  impl.http->stop();
  if (impl.thread.joinable()) impl.thread.join();
  impl.http.reset();
}

int Server::port() const { return impl_->port; }

std::string Server::url() const { return impl_->url(); }

}  // namespace k8s4r::kube_sim
