#include "k8s4r/kube_sim/server.h"

#include "k8s4r/kube_sim/table.h"

#include "api_handler.h"

#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
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

Timestamp now() { return std::chrono::time_point_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now()); }

// The identity of a client certificate that verified against the client CA.
std::optional<ClientCertificate> client_certificate(const httplib::Request& request) {
  if (request.ssl == nullptr) return std::nullopt;
  SSL* ssl = const_cast<SSL*>(request.ssl);
  X509* peer = SSL_get1_peer_certificate(ssl);
  if (peer == nullptr) return std::nullopt;
  std::optional<ClientCertificate> identity;
  if (SSL_get_verify_result(ssl) == X509_V_OK) {
    ClientCertificate cert;
    X509_NAME* subject = X509_get_subject_name(peer);
    const auto entries = [&](int nid) {
      std::vector<std::string> values;
      for (int at = X509_NAME_get_index_by_NID(subject, nid, -1); at >= 0;
           at = X509_NAME_get_index_by_NID(subject, nid, at)) {
        ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at));
        unsigned char* text = nullptr;
        const int length = ASN1_STRING_to_UTF8(&text, data);
        if (length >= 0) values.emplace_back(reinterpret_cast<char*>(text), static_cast<std::size_t>(length));
        OPENSSL_free(text);
      }
      return values;
    };
    const auto names = entries(NID_commonName);
    if (!names.empty()) cert.common_name = names.front();
    cert.organizations = entries(NID_organizationName);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    X509_digest(peer, EVP_sha256(), digest, &length);
    static constexpr char kHex[] = "0123456789abcdef";
    for (unsigned int i = 0; i < length; ++i) {
      cert.sha256_hex += kHex[digest[i] >> 4];
      cert.sha256_hex += kHex[digest[i] & 0xF];
    }
    identity = cert;
  }
  X509_free(peer);
  return identity;
}

HttpRequest to_request(const std::string& method, const httplib::Request& request) {
  HttpRequest converted;
  converted.method = method;
  converted.path = request.path;
  for (const auto& [key, value] : request.params) converted.query.emplace(key, value);
  converted.header = [&request](const std::string& name) { return request.get_header_value(name.c_str()); };
  converted.body = request.body;
  converted.client_certificate = client_certificate(request);
  return converted;
}

}  // namespace

struct Server::Impl {
  Store& store;
  ServerOptions options;
  ApiHandler handler;
  std::unique_ptr<httplib::Server> http;
  std::thread thread;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::mutex faults_mutex;
  std::condition_variable unpaused;
  Faults faults;

  Impl(Store& s, ServerOptions o) : store(s), options(std::move(o)), handler(store, options), faults(options.faults) {}

  std::string url() const {
    return std::string(options.tls_cert_file.empty() ? "http" : "https") + "://" + options.host + ":" +
           std::to_string(port);
  }

  void serve(const std::string& method, const httplib::Request& http_request, httplib::Response& response) {
    const HttpRequest request = to_request(method, http_request);
    if (options.log_requests) {
      std::string query;
      for (const auto& [key, value] : request.query) query += (query.empty() ? "?" : "&") + key + "=" + value;
      spdlog::info("{} {}{} accept={} content-type={}", method, request.path, query, request.header("Accept"),
                   request.header("Content-Type"));
    }
    auto admitted = handler.admit(request);
    if (auto* refused = std::get_if<ApiResponse>(&admitted)) return respond(response, *refused);
    const UserInfo& user = std::get<UserInfo>(admitted);
    if (request.path.rfind("/_sim/", 0) == 0) return admin(method, http_request, response);
    const bool probe = request.path == "/version" || request.path == "/healthz" || request.path == "/livez" ||
                       request.path == "/readyz";
    if (!probe && inject_fault(response)) return;
    HandlerResult result = handler.route(request, user);
    if (result.watch) return stream(std::move(*result.watch), response);
    if (result.raw_body) {
      response.status = result.response.code;
      response.set_content(*result.raw_body, result.content_type);
      return;
    }
    respond(response, result.response);
  }

  // Waits while paused, adds latency, and answers a share of requests with
  // the configured error. True when the request was answered.
  bool inject_fault(httplib::Response& response) {
    Faults current;
    {
      std::unique_lock lock(faults_mutex);
      unpaused.wait(lock, [this] { return !faults.paused || stopping; });
      current = faults;
    }
    if (current.latency.count() > 0) std::this_thread::sleep_for(current.latency);
    if (current.error_rate <= 0) return false;
    thread_local std::mt19937 random{std::random_device{}()};
    if (std::uniform_real_distribution<double>(0, 1)(random) >= current.error_rate) return false;
    if (current.error_code == 429) {
      response.set_header("Retry-After", std::to_string(current.retry_after_seconds));
      respond(response, {429,
                         status_body(429, "TooManyRequests",
                                     "the server has received too many requests and has asked us to try again later "
                                     "(injected by k8s4r-kube-sim)",
                                     json{{"retryAfterSeconds", current.retry_after_seconds}}),
                         {}});
    } else {
      respond(response,
              {current.error_code,
               status_body(current.error_code, "InternalError", "Internal error occurred: injected by k8s4r-kube-sim"),
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
      const auto number = [&](const char* key, bool integer) {
        return !body.contains(key) || (integer ? body[key].is_number_integer() : body[key].is_number());
      };
      if (!number("latencyMs", true) || !number("errorRate", false) || !number("errorCode", true) ||
          !number("retryAfterSeconds", true) || !number("dropWatchEvents", true) ||
          (body.contains("paused") && !body["paused"].is_boolean())) {
        return respond(response, bad_request("faults: latencyMs, errorCode, retryAfterSeconds and dropWatchEvents "
                                             "are integers, errorRate a number, paused a boolean"));
      }
      {
        std::lock_guard lock(faults_mutex);
        if (body.contains("latencyMs")) faults.latency = std::chrono::milliseconds(body["latencyMs"].get<long long>());
        if (body.contains("errorRate")) faults.error_rate = body["errorRate"].get<double>();
        if (body.contains("errorCode")) faults.error_code = body["errorCode"].get<int>();
        if (body.contains("retryAfterSeconds")) faults.retry_after_seconds = body["retryAfterSeconds"].get<int>();
        if (body.contains("paused")) faults.paused = body["paused"].get<bool>();
      }
      if (body.contains("dropWatchEvents") && body["dropWatchEvents"].get<long long>() >= 0)
        store.drop_watch_events(body["dropWatchEvents"].get<std::uint64_t>());
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

  // Streams a watch as chunked newline-delimited JSON until its deadline,
  // the watcher closing, or the client going away.
  void stream(WatchStream watch, httplib::Response& response) {
    auto first_table = std::make_shared<bool>(true);
    auto next_bookmark = std::make_shared<Steady::time_point>(Steady::now() + options.bookmark_interval);
    auto next_keepalive = std::make_shared<Steady::time_point>(Steady::now() + std::chrono::seconds(5));
    const auto bookmark_interval = options.bookmark_interval;
    auto watcher = watch.watcher;
    response.status = 200;
    // The ";stream=watch" parameter also keeps cpp-httplib from gzipping the
    // stream, which would hold events back in the compressor's buffer.
    response.set_chunked_content_provider(
        "application/json;stream=watch",
        [this, watch, first_table, next_bookmark, next_keepalive, bookmark_interval](std::size_t,
                                                                                     httplib::DataSink& sink) {
          const auto encode = [&](const WatchEvent& event) {
            if (watch.table && (event.type == "ADDED" || event.type == "MODIFIED" || event.type == "DELETED")) {
              const json object =
                  to_table(watch.type, {*event.object}, (*event.object)["metadata"].value("resourceVersion", ""), "",
                           now(), watch.include, *first_table);
              *first_table = false;
              return encode_watch_line(event.type, object);
            }
            return event.line ? *event.line : encode_watch_line(event.type, *event.object);
          };
          while (!stopping) {
            const auto now_steady = Steady::now();
            if (now_steady >= watch.deadline) {
              sink.done();
              return true;
            }
            auto wake = std::min({watch.deadline, *next_keepalive, watch.bookmarks ? *next_bookmark : watch.deadline});
            if (auto event = watch.watcher->next(wake)) {
              const std::string line = encode(*event);
              if (!sink.write(line.data(), line.size())) return false;
              *next_keepalive = Steady::now() + std::chrono::seconds(5);
              if (event->type == "ERROR") {
                sink.done();
                return true;
              }
              continue;
            }
            if (watch.watcher->closed()) {
              sink.done();
              return true;
            }
            const auto after = Steady::now();
            if (watch.bookmarks && after >= *next_bookmark) {
              if (auto bookmark = store.bookmark(watch.watcher)) {
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
    const ServerOptions& options = impl.options;
    bool loaded = true;
    auto tls = std::make_unique<httplib::SSLServer>([&options, &loaded](SSL_CTX& context) {
      SSL_CTX_set_options(&context, SSL_OP_NO_SSLv2 | SSL_OP_NO_SSLv3 | SSL_OP_NO_COMPRESSION);
      SSL_CTX_set_min_proto_version(&context, TLS1_2_VERSION);
      loaded = SSL_CTX_use_certificate_chain_file(&context, options.tls_cert_file.c_str()) == 1 &&
               SSL_CTX_use_PrivateKey_file(&context, options.tls_key_file.c_str(), SSL_FILETYPE_PEM) == 1;
      if (loaded && !options.client_ca_file.empty()) {
        // Ask for a client certificate without requiring one, and let the
        // handshake finish whatever it is: whether it verified decides the
        // identity (401 otherwise), as kube-apiserver's x509 authenticator does.
        loaded = SSL_CTX_load_verify_locations(&context, options.client_ca_file.c_str(), nullptr) == 1;
        if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options.client_ca_file.c_str()))
          SSL_CTX_set_client_CA_list(&context, names);
        SSL_CTX_set_verify(&context, SSL_VERIFY_PEER, [](int, X509_STORE_CTX*) { return 1; });
      }
      return loaded;
    });
    if (!loaded || !tls->is_valid()) {
      spdlog::error("cannot load the TLS certificate {}, key {} or client CA {}", impl.options.tls_cert_file,
                    impl.options.tls_key_file, impl.options.client_ca_file);
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
  // Never the library's exception text: a generic 500, as kube-apiserver.
  http.set_exception_handler([](const httplib::Request&, httplib::Response& response, std::exception_ptr) {
    respond(response, {500, status_body(500, "InternalError", "Internal error occurred: the request failed"), {}});
  });
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
  impl.handler.set_address(impl.options.host + ":" + std::to_string(impl.port));
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
