#include "k8s4r/kube/bearer_token.h"
#include "k8s4r/kube/transport.h"

#include <curl/curl.h>

#include <exception>
#include <mutex>
#include <vector>

namespace k8s4r::kube {
namespace {

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
};

struct Exchange {
  std::string body;
  std::string retry_after;
  // Streaming: lines go to on_line while the status is 200.
  const std::function<bool(std::string_view)>* on_line = nullptr;
  const std::atomic<bool>* cancel = nullptr;
  CURL* handle = nullptr;
  std::string partial;
  bool stopped = false;
  std::exception_ptr failure;  // thrown by on_line; rethrown once curl has returned
};

std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
  auto& exchange = *static_cast<Exchange*>(user);
  const std::string_view line(data, size * count);
  constexpr std::string_view kRetryAfter = "retry-after:";
  if (line.size() > kRetryAfter.size()) {
    std::string name(line.substr(0, kRetryAfter.size()));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name == kRetryAfter) {
      std::string value(line.substr(kRetryAfter.size()));
      while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front()))) value.erase(0, 1);
      while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
      exchange.retry_after = value;
    }
  }
  return size * count;
}

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto& exchange = *static_cast<Exchange*>(user);
  const std::size_t length = size * count;
  long status = 0;
  if (exchange.on_line) curl_easy_getinfo(exchange.handle, CURLINFO_RESPONSE_CODE, &status);
  if (!exchange.on_line || status != 200) {
    exchange.body.append(data, length);
    return length;
  }
  exchange.partial.append(data, length);
  std::size_t start = 0;
  for (std::size_t newline; (newline = exchange.partial.find('\n', start)) != std::string::npos; start = newline + 1) {
    const std::string_view line(exchange.partial.data() + start, newline - start);
    if (line.empty()) continue;  // keep-alive newlines
    bool go_on = false;
    try {
      go_on = (*exchange.on_line)(line);
    } catch (...) {
      // Never through curl's C frames.
      exchange.failure = std::current_exception();
    }
    if (!go_on) {
      exchange.stopped = true;
      return 0;  // aborts the transfer
    }
  }
  exchange.partial.erase(0, start);
  return length;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto& exchange = *static_cast<Exchange*>(user);
  return exchange.cancel && exchange.cancel->load() ? 1 : 0;
}

class CurlTransport final : public Transport {
 public:
  explicit CurlTransport(ClientConfig config) : config_(std::move(config)), bearer_(config_.token, config_.token_file) {
    static CurlGlobal global;
  }

  ~CurlTransport() override {
    for (CURL* handle : idle_) curl_easy_cleanup(handle);
  }

  Result<HttpResponse> send(const HttpRequest& request) override { return perform(request, nullptr, request.cancel); }

  Result<HttpResponse> stream(const HttpRequest& request, const std::function<bool(std::string_view)>& on_line,
                              const std::atomic<bool>& cancel) override {
    return perform(request, &on_line, &cancel);
  }

 private:
  // Handles are pooled: each keeps its connection alive between requests.
  CURL* take() {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      CURL* handle = idle_.back();
      idle_.pop_back();
      return handle;
    }
    return curl_easy_init();
  }

  void give_back(CURL* handle) {
    std::lock_guard lock(mutex_);
    idle_.push_back(handle);
  }

  Result<HttpResponse> perform(const HttpRequest& request, const std::function<bool(std::string_view)>* on_line,
                               const std::atomic<bool>* cancel) {
    CURL* handle = take();
    if (handle == nullptr) return Error{"http", "curl_easy_init failed"};
    curl_easy_reset(handle);  // keeps the connection cache
    Exchange exchange;
    exchange.on_line = on_line;
    exchange.cancel = cancel;
    exchange.handle = handle;
    const std::string url = config_.server + request.path;
    curl_easy_setopt(handle, CURLOPT_URL, url.c_str());
    curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(handle, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS, 10'000L);
    // curl's own words for a failure ("SSL certificate problem: unable to get
    // local issuer certificate"), where curl_easy_strerror has only the class
    // ("SSL peer certificate or SSH remote key was not OK").
    char detail[CURL_ERROR_SIZE] = {};
    curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, detail);
    if (!on_line) {
      curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, static_cast<long>(config_.request_timeout.count()));
    } else {
      // A watch may be idle for minutes; TCP keepalive notices a peer that
      // vanished without a reset.
      curl_easy_setopt(handle, CURLOPT_TCP_KEEPALIVE, 1L);
      curl_easy_setopt(handle, CURLOPT_TCP_KEEPIDLE, 30L);
      curl_easy_setopt(handle, CURLOPT_TCP_KEEPINTVL, 10L);
    }
    if (!request.body.empty() || request.method == "POST" || request.method == "PUT" || request.method == "PATCH") {
      curl_easy_setopt(handle, CURLOPT_POSTFIELDS, request.body.c_str());
      curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    }
    curl_slist* headers = nullptr;
    headers = curl_slist_append(headers, "Accept: application/json");
    headers = curl_slist_append(headers, "User-Agent: k8s4r");
    const std::string token = bearer_.current();
    const std::string authorization = "Authorization: Bearer " + token;
    if (!token.empty()) headers = curl_slist_append(headers, authorization.c_str());
    const std::string content_type = "Content-Type: " + request.content_type;
    if (!request.content_type.empty()) headers = curl_slist_append(headers, content_type.c_str());
    headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
    curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers);
    if (!config_.ca_pem.empty()) {
      curl_blob blob{const_cast<char*>(config_.ca_pem.data()), config_.ca_pem.size(), CURL_BLOB_COPY};
      curl_easy_setopt(handle, CURLOPT_CAINFO_BLOB, &blob);
    }
    if (!config_.client_certificate_pem.empty()) {
      curl_blob certificate{const_cast<char*>(config_.client_certificate_pem.data()),
                            config_.client_certificate_pem.size(), CURL_BLOB_COPY};
      curl_blob key{const_cast<char*>(config_.client_key_pem.data()), config_.client_key_pem.size(), CURL_BLOB_COPY};
      curl_easy_setopt(handle, CURLOPT_SSLCERT_BLOB, &certificate);
      curl_easy_setopt(handle, CURLOPT_SSLCERTTYPE, "PEM");
      curl_easy_setopt(handle, CURLOPT_SSLKEY_BLOB, &key);
      curl_easy_setopt(handle, CURLOPT_SSLKEYTYPE, "PEM");
    }
    if (config_.insecure_skip_tls_verify) {
      curl_easy_setopt(handle, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(handle, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(handle, CURLOPT_WRITEDATA, &exchange);
    curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(handle, CURLOPT_HEADERDATA, &exchange);
    if (cancel) {
      curl_easy_setopt(handle, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, on_progress);
      curl_easy_setopt(handle, CURLOPT_XFERINFODATA, &exchange);
    }

    const CURLcode code = curl_easy_perform(handle);
    curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, nullptr);  // `detail` ends with this call
    long status = 0;
    curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
    if (status == 401) bearer_.rejected();
    curl_easy_setopt(handle, CURLOPT_HTTPHEADER, nullptr);
    curl_slist_free_all(headers);
    const bool ended_by_us = exchange.stopped || (cancel && cancel->load());
    if (code != CURLE_OK && !ended_by_us) {
      curl_easy_cleanup(handle);  // its connection is in an unknown state
      const bool never_connected = code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST;
      return Error{never_connected ? "connect" : "http",
                   request.method + " " + url + ": " + (detail[0] != '\0' ? detail : curl_easy_strerror(code))};
    }
    if (ended_by_us) {
      curl_easy_cleanup(handle);  // an aborted stream leaves the connection unusable
    } else {
      give_back(handle);
    }
    if (exchange.failure) std::rethrow_exception(exchange.failure);
    return HttpResponse{status, std::move(exchange.body), std::move(exchange.retry_after)};
  }

  ClientConfig config_;
  BearerToken bearer_;
  std::mutex mutex_;
  std::vector<CURL*> idle_;
};

}  // namespace

std::unique_ptr<Transport> make_curl_transport(const ClientConfig& config) {
  return std::make_unique<CurlTransport>(config);
}

}  // namespace k8s4r::kube
