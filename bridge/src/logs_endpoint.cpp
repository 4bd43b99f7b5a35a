#include "k8s4r/bridge/logs_endpoint.h"

#include "k8s4r/common/base64.h"
#include "k8s4r/common/identifiers.h"
#include "k8s4r/common/rfc3339.h"
#include "k8s4r/crd/resources.h"
#include "log_access.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <optional>
#include <stdexcept>

namespace k8s4r::bridge {

using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// What one request for a piece asks, and how long the robot holds it.
constexpr std::int64_t kPieceBytes = 32 * 1024;
constexpr std::int64_t kHoldMs = 5000;
// A robot silent this long ends the follow (a robot offline, or without our agent).
constexpr auto kGiveUpAfter = 30s;
constexpr auto kGiveUpFirstAfter = 15s;

void fail(httplib::Response& response, int code, const std::string& reason, const std::string& message) {
  response.status = code;
  response.set_content(json{{"kind", "Status"},
                            {"apiVersion", "v1"},
                            {"status", "Failure"},
                            {"message", message},
                            {"reason", reason},
                            {"code", code}}
                               .dump() +
                           "\n",
                       "application/json");
}

std::optional<std::int64_t> count_of(const std::string& text) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

std::string bearer_token(const httplib::Request& request) {
  const std::string header = request.get_header_value("Authorization");
  if (header.size() < 7) return {};
  std::string scheme = header.substr(0, 7);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return scheme == "bearer " ? header.substr(7) : std::string();
}

// One follower's place in the log, across the pieces it asks for.
struct Follow {
  std::string robot, task_uid, follow_id;
  LogStream stream = LogStream::stdout_stream;
  bool follow = false;
  std::optional<std::int64_t> offset, tail_lines, until, since_seconds;
  std::int64_t seq = 0;
  std::chrono::steady_clock::time_point heard = std::chrono::steady_clock::now();
  bool answered = false;
};

// A Task's name: a DNS-1123 subdomain.
bool valid_object_name(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  for (const char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
  }
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  return alnum(name.front()) && alnum(name.back());
}

std::string line(const json& record) { return record.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

}  // namespace

LogsEndpoint::LogsEndpoint(LogsEndpointConfig config, kube::Client& client, LogFollows& follows,
                           daemon::Metrics& metrics)
    : config_(std::move(config)),
      client_(client),
      follows_(follows),
      metrics_(metrics),
      reviews_(config_.reviews_per_second) {
  if (!config_.cert_file.empty() || !config_.key_file.empty()) {
    auto secure = std::make_unique<httplib::SSLServer>(config_.cert_file.c_str(), config_.key_file.c_str());
    if (!secure->is_valid())
      throw std::runtime_error("logs endpoint: cannot use " + config_.cert_file + " and " + config_.key_file);
    server_ = std::move(secure);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  const std::size_t threads = config_.max_followers + 4;  // the rest answer 429
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // What an anonymous caller can hold: a request is a GET with no body, read
  // within 10 s, on a connection that serves a few at most.
  server_->set_payload_max_length(4096);
  server_->set_read_timeout(10, 0);
  server_->set_keep_alive_max_count(4);
  server_->set_keep_alive_timeout(5);
  server_->set_write_timeout(30, 0);
  metrics_.declare("k8s4r_bridge_log_follows_total", daemon::Metrics::Type::counter,
                   "Requests for a task's log, by HTTP status answered");
  metrics_.declare("k8s4r_bridge_log_followers", daemon::Metrics::Type::gauge, "Task logs being streamed now");
  metrics_.declare("k8s4r_bridge_log_bytes_total", daemon::Metrics::Type::counter,
                   "Bytes of task logs received from robots and streamed");
  metrics_.set("k8s4r_bridge_log_followers", {}, 0);
  server_->Get(R"(/apis/robot\.k8s4r\.io/v1alpha1/namespaces/([^/]+)/tasks/([^/]+)/log)",
               [this](const httplib::Request& request, httplib::Response& response) { serve(request, response); });
}

LogsEndpoint::~LogsEndpoint() { stop(); }

int LogsEndpoint::start() {
  const auto colon = config_.bind_address.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("logs-bind-address: host:port, got " + config_.bind_address);
  std::string host = config_.bind_address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const auto port = count_of(config_.bind_address.substr(colon + 1));
  if (!port || *port > 65535) throw std::runtime_error("logs-bind-address: bad port in " + config_.bind_address);
  const int bound = *port == 0 ? server_->bind_to_any_port(host)
                               : (server_->bind_to_port(host, static_cast<int>(*port)) ? static_cast<int>(*port) : -1);
  if (bound < 0) throw std::runtime_error("logs endpoint: cannot listen on " + config_.bind_address);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // Serving before it returns, so a stop() at once is never lost (httplib ignores one before).
  while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return bound;
}

void LogsEndpoint::stop() {
  if (thread_.joinable()) {
    follows_.stop();
    server_->stop();
    thread_.join();
  }
}

bool LogsEndpoint::not_sent_yet(const std::string& namespace_, const std::string& name) {
  auto task = client_.get(crd::kTasks, namespace_, name);
  if (!task) return false;
  const crd::TaskView view = crd::read_task(task.value());
  return !view.deleting &&
         (!view.state || *view.state == crd::TaskState::pending || *view.state == crd::TaskState::dispatching);
}

void LogsEndpoint::serve(const httplib::Request& request, httplib::Response& response) {
  const std::string namespace_ = request.matches[1], name = request.matches[2];
  const auto answer_error = [&](int code, const std::string& reason, const std::string& message) {
    metrics_.add("k8s4r_bridge_log_follows_total", {{"code", std::to_string(code)}});
    fail(response, code, reason, message);
  };
  // Cheap refusals first: nothing unbounded is asked of the API server for them.
  if (!validate_identifier(namespace_) || !valid_object_name(name))
    return answer_error(400, "BadRequest", "not a namespace and a Task name");
  const std::string token = bearer_token(request);
  if (token.empty())
    return answer_error(401, "Unauthorized",
                        "no bearer token: the plugin sends the kubeconfig user's token (or --token)");
  if (following_.load() >= config_.max_followers)
    return answer_error(429, "TooManyRequests",
                        "this bridge streams " + std::to_string(config_.max_followers) + " logs at most; try again");
  {
    // One client asking too often is refused before all of them are.
    std::lock_guard lock(reviews_mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (reviews_by_address_.size() > 4096) reviews_by_address_.clear();
    TokenBucket& mine = reviews_by_address_.try_emplace(request.remote_addr, config_.reviews_per_address).first->second;
    if (!mine.take(now) || !reviews_.take(now))
      return answer_error(429, "TooManyRequests", "too many log requests at once; try again");
  }
  if (config_.not_ready) {
    if (const std::string why = config_.not_ready(); !why.empty())
      return answer_error(503, "ServiceUnavailable", "the bridge is not ready: " + why);
  }
  // Who asks first: nothing about a Task is told to one who may not read it.
  const LogAccess access = may_read_log(client_, token, namespace_, name);
  if (access.code != 200) {
    spdlog::info("logs of task {}/{}: refused ({}): {}", namespace_, name, access.code, access.message);
    return answer_error(access.code,
                        access.code == 401   ? "Unauthorized"
                        : access.code == 403 ? "Forbidden"
                                             : "ServiceUnavailable",
                        access.message);
  }
  auto follow = std::make_shared<Follow>();
  const std::string follow_value = request.get_param_value("follow");
  if (follow_value == "true" || follow_value == "1") {
    follow->follow = true;
  } else if (!follow_value.empty() && follow_value != "false" && follow_value != "0") {
    return answer_error(400, "BadRequest", "follow: true or false, got \"" + follow_value + "\"");
  }
  const std::string stream = request.get_param_value("stream");
  if (stream == "stderr") {
    follow->stream = LogStream::stderr_stream;
  } else if (!stream.empty() && stream != "stdout") {
    return answer_error(400, "BadRequest", "stream: stdout or stderr, got \"" + stream + "\"");
  }
  for (const auto& [key, slot] : {std::pair{"offset", &follow->offset}, std::pair{"tailLines", &follow->tail_lines}}) {
    if (!request.has_param(key)) continue;
    *slot = count_of(request.get_param_value(key));
    if (!*slot) return answer_error(400, "BadRequest", std::string(key) + ": a whole number of at least 0");
  }
  if (follow->tail_lines && *follow->tail_lines > kMaxLogTailLines)
    return answer_error(400, "BadRequest", "tailLines: at most " + std::to_string(kMaxLogTailLines));
  // A time is passed on as seconds back: the robot wrote its times down by its own clock.
  if (request.has_param("sinceSeconds")) {
    follow->since_seconds = count_of(request.get_param_value("sinceSeconds"));
    if (!follow->since_seconds || *follow->since_seconds > kMaxLogSinceSeconds)
      return answer_error(400, "BadRequest", "sinceSeconds: a whole number of seconds, at most 10 years");
  }
  if (request.has_param("sinceTime")) {
    auto since = parse_rfc3339(request.get_param_value("sinceTime"));
    if (!since) return answer_error(400, "BadRequest", "sinceTime: " + since.error().message);
    const auto back =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now() - since.value());
    follow->since_seconds = std::clamp<std::int64_t>(back.count(), 0, kMaxLogSinceSeconds);
  }
  if (namespace_ != config_.namespace_)
    return answer_error(404, "NotFound", "this bridge serves the Tasks of namespace " + config_.namespace_);
  auto task = client_.get(crd::kTasks, namespace_, name);
  if (!task) {
    if (task.error().not_found()) return answer_error(404, "NotFound", task.error().to_string());
    // The API server down is for a while; the bridge refused (its Role) is for good.
    const bool for_a_while = task.error().code == 0 || task.error().code >= 500 || task.error().code == 429;
    return answer_error(for_a_while ? 503 : 500, for_a_while ? "ServiceUnavailable" : "InternalError",
                        "the bridge cannot read the Task: " + task.error().to_string());
  }
  const crd::TaskView view = crd::read_task(task.value());
  if (view.target_robot.empty() || !validate_identifier(view.target_robot) || !validate_identifier(view.uid))
    return answer_error(409, "Conflict", "task " + name + " has no robot yet: its log is on the robot it runs on");
  if (following_.fetch_add(1) >= config_.max_followers) {
    following_.fetch_sub(1);
    return answer_error(429, "TooManyRequests",
                        "this bridge streams " + std::to_string(config_.max_followers) + " logs at most; try again");
  }
  // The place is given back however the stream ends (or if it never starts).
  std::shared_ptr<void> place(nullptr, [this](void*) {
    following_.fetch_sub(1);
    metrics_.set("k8s4r_bridge_log_followers", {}, static_cast<double>(following_.load()));
  });
  metrics_.add("k8s4r_bridge_log_follows_total", {{"code", "200"}});
  metrics_.set("k8s4r_bridge_log_followers", {}, static_cast<double>(following_.load()));
  follow->robot = view.target_robot;
  follow->task_uid = view.uid;
  follow->follow_id = follows_.new_follow_id();
  spdlog::info("logs of task {}/{} on robot {}: {} {} for {}", namespace_, name, follow->robot,
               follow->follow ? "following" : "reading", to_string(follow->stream), access.user);
  response.set_header("Cache-Control", "no-store");
  response.set_chunked_content_provider(
      "application/x-ndjson", [this, follow, place, namespace_, name](std::size_t, httplib::DataSink& sink) {
        const auto write = [&sink](const json& record) {
          const std::string text = line(record);
          return sink.write(text.data(), text.size());
        };
        LogRequest asked;
        asked.robot_id = follow->robot;
        asked.follow_id = follow->follow_id;
        asked.seq = ++follow->seq;
        asked.task_uid = follow->task_uid;
        asked.stream = follow->stream;
        asked.max_bytes = kPieceBytes;
        asked.wait_ms = follow->follow ? kHoldMs : 0;
        if (follow->offset) {
          asked.offset = follow->offset;
        } else {
          asked.tail_lines = follow->tail_lines;
          asked.since_seconds = follow->since_seconds;
        }
        auto chunk = follows_.ask(asked, std::chrono::milliseconds(asked.wait_ms) + 5s);
        const auto now = std::chrono::steady_clock::now();
        if (!chunk) {
          // The bridge stops, or the reader left: the stream ends with no "end", so a reader takes it up again.
          if (follows_.stopped() || !sink.is_writable()) return false;
          if (now - follow->heard < (follow->answered ? kGiveUpAfter : kGiveUpFirstAfter)) {
            // Ask again; meanwhile the reader hears the stream is alive.
            return !follow->offset || write({{"offset", *follow->offset}});
          }
          write({{"error", "RobotNotAnswering"},
                 {"message",
                  "robot " + follow->robot + " has not answered for " +
                      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - follow->heard).count()) +
                      "s: is it online? (kubectl get robot " + follow->robot + ")"}});
          sink.done();
          return true;
        }
        follow->heard = now;
        follow->answered = true;
        if (chunk->error == "TaskNotFound" && follow->follow && not_sent_yet(namespace_, name)) {
          // Not on its robot yet (placed, paused or on its way): a follow waits for it.
          std::this_thread::sleep_for(1s);
          return !follow->offset || write({{"offset", *follow->offset}});
        }
        if (!chunk->error.empty()) {
          write({{"error", chunk->error}, {"message", chunk->message}});
          sink.done();
          return true;
        }
        std::string data = std::move(chunk->data);
        std::int64_t at = chunk->offset;
        if (follow->offset && at < *follow->offset) {
          // Bytes already sent: never twice.
          const auto repeat = static_cast<std::size_t>(*follow->offset - at);
          data.erase(0, std::min(repeat, data.size()));
          at = *follow->offset;
        }
        bool ok = true;
        if (follow->offset && at > *follow->offset) {
          ok = write({{"gap", {{"from", *follow->offset}, {"to", at}}},
                      {"message", "the robot no longer keeps these bytes (its agent rotated the log)"}});
        }
        if (!data.empty()) {
          json record{{"offset", at}};
          if (is_utf8(data)) {
            record["text"] = data;
          } else {
            record["base64"] = base64_encode(data);
          }
          ok = ok && write(record);
          metrics_.add("k8s4r_bridge_log_bytes_total", {}, static_cast<double>(data.size()));
        }
        follow->offset = at + static_cast<std::int64_t>(data.size());
        if (!follow->follow && !follow->until) follow->until = chunk->size;
        if (chunk->ended && *follow->offset >= chunk->size) {
          ok = ok && write({{"end", "TaskEnded"}, {"offset", *follow->offset}});
          sink.done();
        } else if (!follow->follow && (*follow->offset >= *follow->until || data.empty())) {
          // Every byte written when asked, or no more to be had now.
          ok = ok && write({{"end", "CaughtUp"}, {"offset", *follow->offset}});
          sink.done();
        } else if (data.empty()) {
          ok = ok && write({{"offset", *follow->offset}});  // nothing new: the reader knows the stream lives
        }
        return ok;
      });
}

}  // namespace k8s4r::bridge
