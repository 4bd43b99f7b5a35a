// The HTTP(S) layer of k8s4r-kube-sim on Boost.Beast over one Asio
// io_context: every connection is a chain of asynchronous operations on its
// own strand, so an idle keep-alive connection or an open watch holds a
// socket and a few kilobytes, never a thread. A few threads run the context;
// requests are handled on them (the Store's work is short), watches are
// woken by their Watcher when an event is queued, and timers carry
// bookmarks, keep-alive newlines and the watch deadline. Fault injection
// (latency, pausing) waits on timers and queues, never by blocking a thread.
#include "k8s4r/kube_sim/server.h"

#include "k8s4r/kube_sim/table.h"

#include "api_handler.h"

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <atomic>
#include <list>
#include <mutex>
#include <random>
#include <thread>
#include <variant>

namespace k8s4r::kube_sim {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;
using Steady = std::chrono::steady_clock;

namespace {

constexpr std::size_t kMaxBody = 3 * 1024 * 1024;  // kube-apiserver's request body limit
constexpr auto kIdleTimeout = std::chrono::seconds(90);
constexpr auto kKeepaliveInterval = std::chrono::seconds(5);

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

Timestamp now() { return std::chrono::time_point_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now()); }

// "%XX" and "+" in a query component.
std::string url_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '+') {
      out += ' ';
    } else if (c == '%' && i + 2 < text.size() && std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

// The identity of a client certificate that verified against the client CA.
std::optional<ClientCertificate> client_certificate(SSL* ssl) {
  if (ssl == nullptr) return std::nullopt;
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

}  // namespace

class Connection;

struct Server::Impl {
  Store& store;
  ServerOptions options;
  ApiHandler handler;
  std::optional<net::ssl::context> tls;  // outlives every connection's stream
  // Destroyed first in stop(): the handlers it still holds own the
  // connections, which must go while everything they touch is alive.
  std::unique_ptr<net::io_context> io = std::make_unique<net::io_context>();
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  int port = 0;
  std::atomic<bool> stopping{false};

  std::mutex faults_mutex;
  Faults faults;
  // Requests held by a pause: where to continue each, and how.
  std::vector<std::pair<net::any_io_executor, std::function<void()>>> paused_requests;

  std::mutex connections_mutex;
  std::list<std::weak_ptr<Connection>> connections;
  std::atomic<std::size_t> open_connections{0};

  Impl(Store& s, ServerOptions o) : store(s), options(std::move(o)), handler(store, options), faults(options.faults) {}

  std::string url() const {
    return std::string(options.tls_cert_file.empty() ? "http" : "https") + "://" + options.host + ":" +
           std::to_string(port);
  }

  void accept();
  // Runs `then` once the request may go on: after a pause ends and after the
  // injected latency, both waited on without a thread.
  void after_faults(const net::any_io_executor& executor, std::function<void()> then);
  // The injected error for this request, if it draws one.
  std::optional<ApiResponse> injected_error();
  ApiResponse admin(const std::string& method, const std::string& path, const std::string& body);
  void unpause();
};

// One client connection: requests in order, each answered or streamed.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using PlainStream = beast::tcp_stream;
  using TlsStream = beast::ssl_stream<beast::tcp_stream>;

  Connection(Server::Impl& server, tcp::socket socket)
      : server_(server), deadline_timer_(socket.get_executor()), tick_timer_(socket.get_executor()) {
    if (server.tls) {
      stream_.emplace<TlsStream>(std::move(socket), *server.tls);
    } else {
      stream_.emplace<PlainStream>(std::move(socket));
    }
    ++server_.open_connections;
  }
  ~Connection() {
    if (watch_) server_.store.unwatch(watch_->watcher);
    --server_.open_connections;
  }

  void start() {
    if (auto* tls = std::get_if<TlsStream>(&stream_)) {
      beast::get_lowest_layer(*tls).expires_after(std::chrono::seconds(30));
      tls->async_handshake(net::ssl::stream_base::server, [self = shared_from_this()](beast::error_code error) {
        if (error) return self->close();
        self->read();
      });
    } else {
      read();
    }
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    deadline_timer_.cancel();
    tick_timer_.cancel();
    beast::error_code ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    lowest().close();
  }

  net::any_io_executor executor() { return lowest().get_executor(); }

 private:
  beast::tcp_stream& lowest() {
    if (auto* tls = std::get_if<TlsStream>(&stream_)) return beast::get_lowest_layer(*tls);
    return std::get<PlainStream>(stream_);
  }

  template <class Operation>
  void with_stream(Operation&& operation) {
    if (auto* tls = std::get_if<TlsStream>(&stream_)) {
      operation(*tls);
    } else {
      operation(std::get<PlainStream>(stream_));
    }
  }

  void read() {
    if (closed_ || server_.stopping) return close();
    parser_.emplace();
    parser_->body_limit(kMaxBody);
    parser_->header_limit(64 * 1024);
    lowest().expires_after(kIdleTimeout);
    with_stream([this](auto& stream) {
      http::async_read(stream, buffer_, *parser_,
                       [self = shared_from_this()](beast::error_code error, std::size_t) { self->on_read(error); });
    });
  }

  void on_read(beast::error_code error) {
    if (error == http::error::body_limit) {
      return respond(ApiResponse{413,
                                 status_body(413, "RequestEntityTooLarge",
                                             "the server has received a request that is too large: the body is "
                                             "limited to 3145728 bytes"),
                                 {}},
                     false);
    }
    if (error) return close();
    request_ = parser_->release();
    lowest().expires_never();
    guarded([this] { handle(); });
  }

  // A broken invariant in one request is a 500 for that request, never an
  // exception out of the I/O threads (which would end the server), and never
  // a library's text in the answer.
  template <class Work>
  void guarded(Work&& work) {
    try {
      work();
    } catch (const std::exception& error) {
      spdlog::error("{} {}: {}", std::string(request_.method_string()), std::string(request_.target()), error.what());
      if (!watch_) {
        respond(ApiResponse{500, status_body(500, "InternalError", "Internal error occurred: the request failed"), {}},
                false);
      } else {
        close();
      }
    }
  }

  HttpRequest to_request() {
    HttpRequest request;
    request.method = std::string(request_.method_string());
    const std::string target(request_.target());
    const std::size_t question = target.find('?');
    request.path = url_decode(std::string_view(target).substr(0, question));
    if (question != std::string::npos) {
      std::string_view query = std::string_view(target).substr(question + 1);
      while (!query.empty()) {
        const std::size_t amp = query.find('&');
        const std::string_view pair = query.substr(0, amp);
        const std::size_t equals = pair.find('=');
        if (!pair.empty()) {
          request.query.emplace(url_decode(pair.substr(0, equals)),
                                equals == std::string_view::npos ? "" : url_decode(pair.substr(equals + 1)));
        }
        if (amp == std::string_view::npos) break;
        query.remove_prefix(amp + 1);
      }
    }
    auto headers = std::make_shared<http::request<http::string_body>::header_type>(request_.base());
    request.header = [headers](const std::string& name) { return std::string((*headers)[name]); };
    request.body = std::move(request_.body());
    if (auto* tls = std::get_if<TlsStream>(&stream_))
      request.client_certificate = client_certificate(tls->native_handle());
    return request;
  }

  void handle() {
    auto request = std::make_shared<HttpRequest>(to_request());
    if (server_.options.log_requests) {
      std::string query;
      for (const auto& [key, value] : request->query) query += (query.empty() ? "?" : "&") + key + "=" + value;
      spdlog::info("{} {}{} accept={} content-type={}", request->method, request->path, query,
                   request->header("Accept"), request->header("Content-Type"));
    }
    auto admitted = server_.handler.admit(*request);
    if (auto* refused = std::get_if<ApiResponse>(&admitted)) return respond(*refused, request_.keep_alive());
    auto user = std::make_shared<UserInfo>(std::get<UserInfo>(admitted));
    if (request->path.rfind("/_sim/", 0) == 0)
      return respond(server_.admin(request->method, request->path, request->body), request_.keep_alive());
    const bool probe = request->path == "/version" || request->path == "/healthz" || request->path == "/livez" ||
                       request->path == "/readyz";
    if (probe) return route(*request, *user);
    server_.after_faults(executor(), [self = shared_from_this(), request, user] {
      if (self->closed_) return;
      if (auto error = self->server_.injected_error()) return self->respond(*error, self->request_.keep_alive());
      self->guarded([&] { self->route(*request, *user); });
    });
  }

  void route(const HttpRequest& request, const UserInfo& user) {
    HandlerResult result = server_.handler.route(request, user);
    if (result.watch) return start_watch(std::move(*result.watch));
    if (result.raw_body) return respond_raw(result.response.code, *result.raw_body, result.content_type, {}, {});
    respond(result.response, request_.keep_alive());
  }

  void respond(const ApiResponse& api, bool keep_alive) {
    std::vector<std::pair<std::string, std::string>> headers;
    if (api.code == 429 && api.body.contains("details") && api.body["details"].contains("retryAfterSeconds"))
      headers.emplace_back("Retry-After", std::to_string(api.body["details"]["retryAfterSeconds"].get<int>()));
    respond_raw(api.code, dump(api.body), "application/json", api.warnings, headers, keep_alive);
  }

  void respond_raw(int code, std::string body, const std::string& content_type,
                   const std::vector<std::string>& warnings,
                   const std::vector<std::pair<std::string, std::string>>& headers, bool keep_alive = true) {
    auto response =
        std::make_shared<http::response<http::string_body>>(static_cast<http::status>(code), request_.version());
    response->set(http::field::content_type, content_type);
    response->set(http::field::cache_control, "no-cache, private");
    for (const std::string& warning : warnings) response->insert("Warning", warning_header(warning));
    for (const auto& [name, value] : headers) response->set(name, value);
    response->body() = std::move(body);
    response->keep_alive(keep_alive && request_.keep_alive() && !server_.stopping);
    response->prepare_payload();
    lowest().expires_after(std::chrono::seconds(30));
    with_stream([this, response](auto& stream) {
      http::async_write(stream, *response, [self = shared_from_this(), response](beast::error_code error, std::size_t) {
        if (error || !response->keep_alive()) return self->close();
        self->read();
      });
    });
  }

  // ---- watch ----------------------------------------------------------------------

  void start_watch(WatchStream watch) {
    watch_ = std::move(watch);
    first_table_ = true;
    const auto executor_ = executor();
    std::weak_ptr<Connection> weak = shared_from_this();
    watch_->watcher->set_listener([weak, executor_] {
      net::post(executor_, [weak] {
        if (auto self = weak.lock()) self->pump();
      });
    });
    auto header = std::make_shared<http::response<http::empty_body>>(http::status::ok, request_.version());
    header->set(http::field::content_type, "application/json;stream=watch");
    header->set(http::field::cache_control, "no-cache, private");
    header->chunked(true);
    auto serializer = std::make_shared<http::response_serializer<http::empty_body>>(*header);
    writing_ = true;
    lowest().expires_never();
    with_stream([this, header, serializer](auto& stream) {
      http::async_write_header(stream, *serializer,
                               [self = shared_from_this(), header, serializer](beast::error_code error, std::size_t) {
                                 self->writing_ = false;
                                 if (error) return self->close();
                                 self->arm_timers();
                                 self->watch_for_hangup();
                                 self->pump();
                               });
    });
  }

  void arm_timers() {
    deadline_timer_.expires_at(watch_->deadline);
    deadline_timer_.async_wait([self = shared_from_this()](beast::error_code error) {
      if (error || !self->watch_) return;
      self->ending_ = true;
      self->pump();
    });
    next_bookmark_ = Steady::now() + server_.options.bookmark_interval;
    next_keepalive_ = Steady::now() + kKeepaliveInterval;
    schedule_tick();
  }

  void schedule_tick() {
    auto wake = watch_->bookmarks ? std::min(next_bookmark_, next_keepalive_) : next_keepalive_;
    tick_timer_.expires_at(wake);
    tick_timer_.async_wait([self = shared_from_this()](beast::error_code error) {
      if (error || !self->watch_ || self->closed_) return;
      self->tick_due_ = true;
      self->pump();
    });
  }

  // A client that goes away during a watch is noticed at once: it sends
  // nothing on a watch's connection, so a read that ends means it hung up.
  void watch_for_hangup() {
    hangup_buffer_ = std::make_shared<std::array<char, 1>>();
    with_stream([this](auto& stream) {
      stream.async_read_some(net::buffer(*hangup_buffer_),
                             [self = shared_from_this()](beast::error_code error, std::size_t) {
                               if (error && self->watch_) self->close();
                             });
    });
  }

  void pump() {
    guarded([this] { pump_unchecked(); });
  }

  void pump_unchecked() {
    if (!watch_ || closed_ || writing_) return;
    std::string batch;
    bool finished = ending_ || server_.stopping;
    while (!finished && batch.size() < 256 * 1024) {
      auto event = watch_->watcher->try_next();
      if (!event) break;
      batch += encode(*event);
      if (event->type == "ERROR") finished = true;
    }
    if (!finished && batch.empty() && watch_->watcher->closed()) finished = true;
    if (tick_due_ && !finished) {
      tick_due_ = false;
      const auto at = Steady::now();
      if (watch_->bookmarks && at >= next_bookmark_) {
        if (batch.empty()) {
          if (auto bookmark = server_.store.bookmark(watch_->watcher)) batch += encode(*bookmark);
        }
        next_bookmark_ = at + server_.options.bookmark_interval;
      }
      // A bare newline: JSON stream readers skip it, and writing it tells us
      // when a client has gone away without closing.
      if (batch.empty() && at >= next_keepalive_) batch = "\n";
      schedule_tick();
    }
    if (!batch.empty()) {
      next_keepalive_ = Steady::now() + kKeepaliveInterval;
      write_chunk(std::make_shared<std::string>(std::move(batch)), finished);
    } else if (finished) {
      finish_watch();
    }
  }

  void write_chunk(std::shared_ptr<std::string> data, bool then_finish) {
    writing_ = true;
    lowest().expires_after(std::chrono::seconds(30));  // a client that stops reading is dropped
    with_stream([this, data, then_finish](auto& stream) {
      net::async_write(stream, http::make_chunk(net::buffer(*data)),
                       [self = shared_from_this(), data, then_finish](beast::error_code error, std::size_t) {
                         self->writing_ = false;
                         if (error) return self->close();
                         self->lowest().expires_never();
                         if (then_finish) return self->finish_watch();
                         self->pump();
                       });
    });
  }

  void finish_watch() {
    writing_ = true;
    auto last = std::make_shared<http::chunk_last<http::chunk_crlf>>();
    deadline_timer_.cancel();
    tick_timer_.cancel();
    with_stream([this, last](auto& stream) {
      net::async_write(stream, *last, [self = shared_from_this(), last](beast::error_code, std::size_t) {
        // The hang-up read is still pending on the socket; the simplest
        // correct end of a watch is to close, as clients reconnect anyway.
        self->close();
      });
    });
  }

  std::string encode(const WatchEvent& event) {
    if (watch_->table && (event.type == "ADDED" || event.type == "MODIFIED" || event.type == "DELETED")) {
      const json object =
          to_table(watch_->type, {*event.object}, (*event.object)["metadata"].value("resourceVersion", ""), "", now(),
                   watch_->include, first_table_);
      first_table_ = false;
      return encode_watch_line(event.type, object);
    }
    return event.line ? *event.line : encode_watch_line(event.type, *event.object);
  }

  Server::Impl& server_;
  std::variant<std::monostate, PlainStream, TlsStream> stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  bool closed_ = false;

  std::optional<WatchStream> watch_;
  net::steady_timer deadline_timer_;
  net::steady_timer tick_timer_;
  Steady::time_point next_bookmark_, next_keepalive_;
  bool writing_ = false, ending_ = false, tick_due_ = false, first_table_ = true;
  std::shared_ptr<std::array<char, 1>> hangup_buffer_;
};

void Server::Impl::accept() {
  acceptor->async_accept(net::make_strand(*io), [this](beast::error_code error, tcp::socket socket) {
    if (stopping) return;
    if (!error) {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto connection = std::make_shared<Connection>(*this, std::move(socket));
      {
        std::lock_guard lock(connections_mutex);
        connections.remove_if([](const std::weak_ptr<Connection>& weak) { return weak.expired(); });
        connections.push_back(connection);
      }
      connection->start();
    } else if (error != net::error::operation_aborted) {
      // Out of descriptors (or another transient failure): try again shortly
      // instead of spinning on the error.
      auto timer = std::make_shared<net::steady_timer>(*io, std::chrono::milliseconds(50));
      timer->async_wait([this, timer](beast::error_code) {
        if (!stopping) accept();
      });
      return;
    }
    accept();
  });
}

void Server::Impl::after_faults(const net::any_io_executor& executor, std::function<void()> then) {
  std::chrono::milliseconds latency{0};
  {
    std::lock_guard lock(faults_mutex);
    if (faults.paused && !stopping) {
      paused_requests.emplace_back(executor, std::move(then));
      return;
    }
    latency = faults.latency;
  }
  if (latency.count() <= 0) return then();
  auto timer = std::make_shared<net::steady_timer>(executor, latency);
  timer->async_wait([timer, then](beast::error_code) { then(); });
}

void Server::Impl::unpause() {
  std::vector<std::pair<net::any_io_executor, std::function<void()>>> waiting;
  {
    std::lock_guard lock(faults_mutex);
    if (faults.paused && !stopping) return;
    waiting.swap(paused_requests);
  }
  for (auto& [executor, then] : waiting) {
    net::post(executor, [this, executor = executor, then = std::move(then)] { after_faults(executor, then); });
  }
}

std::optional<ApiResponse> Server::Impl::injected_error() {
  Faults current;
  bool forced = false;
  {
    std::lock_guard lock(faults_mutex);
    current = faults;
    if (faults.fail_next > 0) {
      --faults.fail_next;
      forced = true;
    }
  }
  if (!forced) {
    if (current.error_rate <= 0) return std::nullopt;
    thread_local std::mt19937 random{std::random_device{}()};
    if (std::uniform_real_distribution<double>(0, 1)(random) >= current.error_rate) return std::nullopt;
  }
  if (current.error_code == 429) {
    return ApiResponse{429,
                       status_body(429, "TooManyRequests",
                                   "the server has received too many requests and has asked us to try again later "
                                   "(injected by k8s4r-kube-sim)",
                                   json{{"retryAfterSeconds", current.retry_after_seconds}}),
                       {}};
  }
  return ApiResponse{
      current.error_code,
      status_body(current.error_code, "InternalError", "Internal error occurred: injected by k8s4r-kube-sim"),
      {}};
}

ApiResponse Server::Impl::admin(const std::string& method, const std::string& path, const std::string& request_body) {
  if (method == "GET" && path == "/_sim/stats") {
    json body = store.stats();
    body["connections"] = open_connections.load();
    body["requests"] = handler.request_counts();
    std::lock_guard lock(faults_mutex);
    body["faults"] = {{"latencyMs", faults.latency.count()},
                      {"errorRate", faults.error_rate},
                      {"failNext", faults.fail_next},
                      {"errorCode", faults.error_code},
                      {"retryAfterSeconds", faults.retry_after_seconds},
                      {"paused", faults.paused}};
    return {200, body, {}};
  }
  if (method != "POST") return method_not_allowed("admin endpoints take POST");
  if (path == "/_sim/faults") {
    const json body = json::parse(request_body.empty() ? "{}" : request_body, nullptr, false);
    if (!body.is_object()) return bad_request("faults: body must be a JSON object");
    const auto number = [&](const char* key, bool integer) {
      return !body.contains(key) || (integer ? body[key].is_number_integer() : body[key].is_number());
    };
    if (!number("latencyMs", true) || !number("errorRate", false) || !number("errorCode", true) ||
        !number("failNext", true) || (body.contains("failNext") && body["failNext"].get<long long>() < 0) ||
        !number("retryAfterSeconds", true) || !number("dropWatchEvents", true) ||
        (body.contains("paused") && !body["paused"].is_boolean())) {
      return bad_request(
          "faults: latencyMs, errorCode, retryAfterSeconds and dropWatchEvents are integers, failNext a non-negative "
          "integer, errorRate a number, paused a boolean");
    }
    {
      std::lock_guard lock(faults_mutex);
      if (body.contains("latencyMs")) faults.latency = std::chrono::milliseconds(body["latencyMs"].get<long long>());
      if (body.contains("errorRate")) faults.error_rate = body["errorRate"].get<double>();
      if (body.contains("failNext")) faults.fail_next = body["failNext"].get<std::uint64_t>();
      if (body.contains("errorCode")) faults.error_code = body["errorCode"].get<int>();
      if (body.contains("retryAfterSeconds")) faults.retry_after_seconds = body["retryAfterSeconds"].get<int>();
      if (body.contains("paused")) faults.paused = body["paused"].get<bool>();
    }
    if (body.contains("dropWatchEvents") && body["dropWatchEvents"].get<long long>() >= 0)
      store.drop_watch_events(body["dropWatchEvents"].get<std::uint64_t>());
    unpause();
    return {200, json{{"ok", true}}, {}};
  }
  if (path == "/_sim/close-watches") {
    store.close_all_watches();
    return {200, json{{"ok", true}}, {}};
  }
  if (path == "/_sim/compact") {
    store.compact();
    return {200, json{{"ok", true}, {"resourceVersion", store.resource_version()}}, {}};
  }
  return not_found_path(path);
}

Server::Server(Store& store, ServerOptions options) : impl_(std::make_unique<Impl>(store, std::move(options))) {}

Server::~Server() { stop(); }

bool Server::start() {
  Impl& impl = *impl_;
  const ServerOptions& options = impl.options;
  if (!options.tls_cert_file.empty()) {
    impl.tls.emplace(net::ssl::context::tls_server);
    auto& context = *impl.tls;
    context.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                        net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 | net::ssl::context::no_tlsv1_1);
    beast::error_code error;
    context.use_certificate_chain_file(options.tls_cert_file, error);
    if (!error) context.use_private_key_file(options.tls_key_file, net::ssl::context::pem, error);
    if (!error && !options.client_ca_file.empty()) {
      // Ask for a client certificate without requiring one, and let the
      // handshake finish whatever it is: whether it verified decides the
      // identity (401 otherwise), as kube-apiserver's x509 authenticator does.
      context.load_verify_file(options.client_ca_file, error);
      if (!error) {
        if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options.client_ca_file.c_str()))
          SSL_CTX_set_client_CA_list(context.native_handle(), names);
        SSL_CTX_set_verify(context.native_handle(), SSL_VERIFY_PEER, [](int, X509_STORE_CTX*) { return 1; });
      }
    }
    if (error) {
      spdlog::error("cannot load the TLS certificate {}, key {} or client CA {}: {}", options.tls_cert_file,
                    options.tls_key_file, options.client_ca_file, error.message());
      return false;
    }
  }
  beast::error_code error;
  const auto address = net::ip::make_address(options.host == "localhost" ? "127.0.0.1" : options.host, error);
  if (!error) {
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
    impl.acceptor.emplace(*impl.io);
    impl.acceptor->open(endpoint.protocol(), error);
    if (!error) impl.acceptor->set_option(net::socket_base::reuse_address(true), error);
    if (!error) impl.acceptor->bind(endpoint, error);
    if (!error) impl.acceptor->listen(net::socket_base::max_listen_connections, error);
  }
  if (error) {
    spdlog::error("cannot listen on {}:{}: {}", options.host, options.port, error.message());
    return false;
  }
  impl.port = impl.acceptor->local_endpoint().port();
  impl.handler.set_address(options.host + ":" + std::to_string(impl.port));
  impl.accept();
  const int threads = std::max(1, options.threads);
  for (int i = 0; i < threads; ++i) impl.threads.emplace_back([&impl] { impl.io->run(); });
  return true;
}

void Server::stop() {
  Impl& impl = *impl_;
  if (impl.threads.empty()) return;
  impl.stopping = true;
  impl.unpause();
  impl.store.close_all_watches();
  impl.io->stop();
  for (std::thread& thread : impl.threads) thread.join();
  impl.threads.clear();
  // Closes the listening socket, then destroys every pending handler and with
  // them the connections (their sockets close, their watches end).
  impl.acceptor.reset();
  impl.io.reset();
}

int Server::port() const { return impl_->port; }

std::string Server::url() const { return impl_->url(); }

}  // namespace k8s4r::kube_sim
