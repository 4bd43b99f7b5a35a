#include "api_handler.h"
#include "k8s4r/common/json_depth.h"

#include "k8s4r/kube_sim/discovery.h"

#include "go_text.h"
#include "k8s4r/kube_sim/protobuf.h"
#include "store_util.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace k8s4r::kube_sim {

using nlohmann::json;
using Steady = std::chrono::steady_clock;

namespace {

const std::vector<std::string> kPublicPaths = {"/version", "/version/", "/healthz", "/livez", "/readyz"};

// Go's strconv.ParseBool as the API reads query booleans: "0" and "false" are
// false, anything else (even empty) true.
bool query_bool(const std::string& value) { return !(value == "0" || lowercase(value) == "false"); }

// strconv.ParseInt(s, 10, 64), with its error text.
std::variant<std::int64_t, std::string> parse_int64(const std::string& text) {
  const std::string syntax = "strconv.ParseInt: parsing \"" + text + "\": invalid syntax";
  if (text.empty()) return syntax;
  std::size_t at = (text[0] == '-' || text[0] == '+') ? 1 : 0;
  if (at == text.size()) return syntax;
  unsigned long long value = 0;
  bool overflow = false;
  for (; at < text.size(); ++at) {
    if (text[at] < '0' || text[at] > '9') return syntax;
    const unsigned digit = static_cast<unsigned>(text[at] - '0');
    if (value > (18446744073709551615ULL - digit) / 10) {
      overflow = true;
    } else {
      value = value * 10 + digit;
    }
  }
  const bool negative = text[0] == '-';
  if (overflow || value > (negative ? 9223372036854775808ULL : 9223372036854775807ULL))
    return "strconv.ParseInt: parsing \"" + text + "\": value out of range";
  return negative ? static_cast<std::int64_t>(0ULL - value) : static_cast<std::int64_t>(value);
}

ApiResponse options_invalid(const std::string& kind, std::vector<FieldCause> causes) {
  ApiResponse response = invalid({"", "", ""}, kind + ".meta.k8s.io", causes);
  response.body["details"]["group"] = "meta.k8s.io";
  return response;
}

// ValidateListOptions of k8s.io/apimachinery (with the WatchList feature on,
// as in 1.32).
std::optional<ApiResponse> validate_list_options(const HttpRequest& request, bool watching) {
  std::vector<FieldCause> causes;
  const std::string match = request.param("resourceVersionMatch");
  const std::string version = request.param("resourceVersion");
  const bool has_continue = !request.param("continue").empty();
  const bool has_initial = request.has_param("sendInitialEvents");
  const auto forbidden = [&](const std::string& field, const std::string& why) {
    causes.push_back({"FieldValueForbidden", "Forbidden: " + why, field});
  };
  if (!watching) {
    if (!match.empty() && version.empty())
      forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden unless resourceVersion is provided");
    if (!match.empty() && has_continue)
      forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided");
    if (!match.empty() && match != "Exact" && match != "NotOlderThan")
      causes.push_back({"FieldValueNotSupported",
                        "Unsupported value: \"" + match + "\": supported values: \"Exact\", \"NotOlderThan\", \"\"",
                        "resourceVersionMatch"});
    if (match == "Exact" && version == "0")
      forbidden("resourceVersionMatch", "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"");
    if (has_initial) forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list");
  } else {
    if (has_initial && match != "NotOlderThan")
      forbidden("resourceVersionMatch", "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan");
    if (!match.empty() && !has_initial)
      forbidden("resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided");
    if (!match.empty() && match != "NotOlderThan")
      causes.push_back({"FieldValueNotSupported",
                        "Unsupported value: \"" + match + "\": supported values: \"NotOlderThan\"",
                        "resourceVersionMatch"});
    if (!match.empty() && has_continue)
      forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided");
  }
  if (causes.empty()) return std::nullopt;
  return options_invalid("ListOptions", causes);
}

std::optional<ApiResponse> validate_write_options(const HttpRequest& request, const std::string& kind) {
  std::vector<FieldCause> causes;
  if (request.has_param("fieldValidation")) {
    const std::string value = request.param("fieldValidation");
    if (value != "" && value != "Ignore" && value != "Strict" && value != "Warn")
      causes.push_back(
          {"FieldValueNotSupported",
           "Unsupported value: \"" + value + "\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"",
           "fieldValidation"});
  }
  if (request.has_param("fieldManager")) {
    // ValidateFieldManager: at most 128 bytes, printable characters only.
    const std::string manager = request.param("fieldManager");
    if (manager.size() > 128)
      causes.push_back({"FieldValueTooLong", "Too long: may not be more than 128 bytes", "fieldManager"});
    for (std::size_t i = 0; i < manager.size(); ++i) {
      const auto c = static_cast<unsigned char>(manager[i]);
      if (c < 0x20 || c == 0x7f) {
        char code[16];
        std::snprintf(code, sizeof code, "U+%04X", c);
        causes.push_back({"FieldValueInvalid",
                          "Invalid value: " + go_quote(manager) + ": invalid character " + code + " (at position " +
                              std::to_string(i) + ")",
                          "fieldManager"});
      }
    }
  }
  if (kind == "PatchOptions") {
    const bool apply = request.header("Content-Type").rfind("application/apply-patch+yaml", 0) == 0;
    if (apply && request.param("fieldManager").empty())
      causes.push_back({"FieldValueRequired", "Required value: is required for apply patch", "fieldManager"});
    if (!apply && request.has_param("force"))
      causes.push_back({"FieldValueForbidden", "Forbidden: may not be specified for non-apply patch", "force"});
  }
  for (auto [it, end] = request.query.equal_range("dryRun"); it != end; ++it) {
    if (it->second != "All") {
      causes.push_back({"FieldValueNotSupported",
                        "Unsupported value: []string{\"" + it->second + "\"}: supported values: \"All\"", "dryRun"});
      break;
    }
  }
  if (causes.empty()) return std::nullopt;
  return options_invalid(kind, causes);
}

// Who writes, for managedFields: ?fieldManager, else what the User-Agent
// names before its first '/' (kubectl, curl, OpenAPI-Generator), printable
// characters only and at most 128 bytes, as kube-apiserver takes it.
std::string field_manager(const HttpRequest& request) {
  if (request.has_param("fieldManager")) return request.param("fieldManager");
  const std::string agent = request.header("User-Agent");
  std::string manager;
  for (char c : agent.substr(0, agent.find('/'))) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) manager += c;
  }
  return manager.substr(0, 128);
}

bool wants_table(const HttpRequest& request) { return request.header("Accept").find("as=Table") != std::string::npos; }

IncludeObject include_object(const HttpRequest& request) {
  const std::string value = request.param("includeObject");
  if (value == "None") return IncludeObject::none;
  if (value == "Object") return IncludeObject::object;
  return IncludeObject::metadata;
}

Timestamp now() { return std::chrono::time_point_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now()); }

HandlerResult answer(ApiResponse response) {
  return HandlerResult{std::move(response), std::nullopt, "application/json", std::nullopt};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

ApiHandler::ApiHandler(Store& store, const ServerOptions& options) : store_(store), options_(options) {
  AuthenticationOptions authentication;
  if (!options.token_auth_file.empty()) {
    auto tokens = parse_token_file(read_file(options.token_auth_file));
    if (!tokens) throw std::runtime_error(tokens.error().to_string());
    authentication.static_tokens = tokens.value();
  }
  if (!options.token.empty()) {
    // The admin token the kubeconfig carries: a cluster admin, as kubeadm's
    // admin.conf identity is.
    authentication.static_tokens[options.token] = UserInfo{"kubernetes-admin", "", {"system:masters"}, {}};
  }
  authentication.anonymous = true;
  authentication.issuer = options.service_account_issuer;
  authentication.audiences = options.api_audiences;
  const auto accounts = store_.find_type("", "v1", "serviceaccounts");
  authenticator_ = std::make_unique<Authenticator>(
      authentication,
      [this, accounts](const std::string& namespace_, const std::string& name) -> std::optional<std::string> {
        ApiResponse got = store_.get(Target{*accounts, namespace_}, name);
        if (!got.ok() || metadata_of(got.body).contains("deletionTimestamp")) return std::nullopt;
        return string_at(metadata_of(got.body), "uid");
      },
      now);
  if (options.authorization_mode == "RBAC") {
    RbacSource source;
    source.list = [this](const std::string& plural, const std::string& namespace_) {
      std::vector<json> objects;
      auto type = store_.find_type("rbac.authorization.k8s.io", "v1", plural);
      ApiResponse listed = store_.list(Target{*type, namespace_}, {});
      if (listed.ok()) {
        for (json& item : listed.body["items"]) objects.push_back(std::move(item));
      }
      return objects;
    };
    source.get = [this](const std::string& plural, const std::string& namespace_,
                        const std::string& name) -> std::optional<json> {
      auto type = store_.find_type("rbac.authorization.k8s.io", "v1", plural);
      ApiResponse got = store_.get(Target{*type, namespace_}, name);
      if (!got.ok()) return std::nullopt;
      return got.body;
    };
    rbac_ = std::make_unique<RbacAuthorizer>(source);
  }
  reviews_ = std::make_unique<Reviews>(
      store_, *authenticator_,
      [this](const UserInfo& user, const RequestAttributes& attributes) { return authorize(user, attributes); },
      rbac_.get());
}

Decision ApiHandler::authorize(const UserInfo& user, const RequestAttributes& attributes) const {
  if (!rbac_) return {true, ""};
  return rbac_->authorize(user, attributes);
}

std::variant<UserInfo, ApiResponse> ApiHandler::admit(const HttpRequest& request) const {
  auto authenticated = authenticator_->authenticate(request.header("Authorization"), request.client_certificate);
  if (!authenticated) return unauthorized();
  UserInfo user = authenticated.value();
  if (user.name == "system:anonymous") {
    const bool credentials_configured =
        !options_.token.empty() || !options_.token_auth_file.empty() || !options_.client_ca_file.empty();
    const bool allowed = options_.anonymous_auth.value_or(!credentials_configured) ||
                         (!options_.anonymous_auth.has_value() &&
                          std::find(kPublicPaths.begin(), kPublicPaths.end(), request.path) != kPublicPaths.end());
    if (!allowed) return unauthorized();
  }
  // Impersonation: kubectl --as / --as-group, each item authorized with the
  // verb "impersonate".
  const std::string as_user = request.header("Impersonate-User");
  const std::string as_group = request.header("Impersonate-Group");
  if (!as_user.empty() || !as_group.empty()) {
    if (as_user.empty()) return bad_request("requested [{Group  " + as_group + "  }] without impersonating a user");
    RequestAttributes check;
    check.resource_request = true;
    check.verb = "impersonate";
    const std::string prefix = "system:serviceaccount:";
    UserInfo target{as_user, "", {}, {}};
    if (as_user.rfind(prefix, 0) == 0 && as_user.find(':', prefix.size()) != std::string::npos) {
      const std::size_t colon = as_user.find(':', prefix.size());
      check.resource = "serviceaccounts";
      check.namespace_ = as_user.substr(prefix.size(), colon - prefix.size());
      check.name = as_user.substr(colon + 1);
      target.groups = {"system:serviceaccounts", "system:serviceaccounts:" + check.namespace_};
    } else {
      check.resource = "users";
      check.name = as_user;
    }
    if (Decision decision = authorize(user, check); !decision.allowed) return forbidden(user, check, decision.reason);
    if (!as_group.empty()) {
      target.groups.clear();
      std::stringstream groups(as_group);
      std::string group;
      while (std::getline(groups, group, ',')) {
        RequestAttributes group_check{true, "impersonate", "", "", "", "", "groups", "", group};
        if (Decision decision = authorize(user, group_check); !decision.allowed)
          return forbidden(user, group_check, decision.reason);
        target.groups.push_back(group);
      }
    }
    if (target.name == "system:anonymous") {
      target.groups.push_back("system:unauthenticated");
    } else {
      add_authenticated_group(target);
    }
    user = target;
  }
  const RequestAttributes attributes = request_attributes(request.method, request.path, request.query);
  if (Decision decision = authorize(user, attributes); !decision.allowed)
    return forbidden(user, attributes, decision.reason);
  if (attributes.resource_request) {
    std::string key = attributes.verb + " " + attributes.resource;
    if (!attributes.subresource.empty()) key += "/" + attributes.subresource;
    // Bounded: resource names come from the URL, so a client asking for
    // made-up ones would otherwise grow this map without end.
    constexpr std::size_t kMaxCounted = 1'000;  // of at most 64 KiB each (the header limit)
    std::lock_guard lock(counts_mutex_);
    const bool room = counted_ < kMaxCounted;
    auto& by_request = counts_[room || counts_.contains(user.name) ? user.name : "(other users)"];
    if (!by_request.contains(key)) {
      if (room) {
        ++counted_;
      } else {
        key = "(other requests)";
      }
    }
    ++by_request[key];
  }
  return user;
}

json ApiHandler::request_counts() const {
  std::lock_guard lock(counts_mutex_);
  json counts = json::object();
  for (const auto& [user, by_request] : counts_) counts[user] = by_request;
  return counts;
}

std::variant<json, ApiResponse> ApiHandler::parse_body(const HttpRequest& request) const {
  const std::string content_type = request.header("Content-Type");
  if (content_type.rfind("application/vnd.kubernetes.protobuf", 0) == 0) {
    ProtobufResult decoded = decode_protobuf(request.body);
    if (decoded.object) return *decoded.object;
    if (decoded.unsupported_kind) return unsupported_media_type(decoded.error);
    return bad_request(decoded.error);
  }
  if (!content_type.empty() && content_type.rfind("application/json", 0) != 0 && content_type.rfind("*/*", 0) != 0) {
    return unsupported_media_type(
        "the body of the request was in an unknown format - accepted media types include: application/json, "
        "application/yaml, application/vnd.kubernetes.protobuf");
  }
  if (json_nested_deeper_than(request.body, kMaxJsonDepth))
    return bad_request("the object provided is unrecognized: json: exceeded max depth of " +
                       std::to_string(kMaxJsonDepth));
  json body = json::parse(request.body, nullptr, false);
  if (body.is_discarded()) return bad_request("the object provided is unrecognized: the body is not valid JSON");
  if (!body.is_object()) return bad_request("the object provided is unrecognized: the body must be a JSON object");
  return body;
}

HandlerResult ApiHandler::route(const HttpRequest& request, const UserInfo& user) const {
  const std::string& method = request.method;
  const std::vector<std::string> segments = split_path(request.path);
  const auto types = [this] { return store_.served_types(); };
  if (std::find(kPublicPaths.begin(), kPublicPaths.end(), request.path) != kPublicPaths.end()) {
    if (request.path.rfind("/version", 0) == 0) return answer({200, version_info(), {}});
    HandlerResult ok = answer({200, nullptr, {}});
    ok.raw_body = "ok";
    ok.content_type = "text/plain; charset=utf-8";
    return ok;
  }
  if (segments.empty())
    return answer({200, json{{"paths", {"/api", "/api/v1", "/apis", "/openapi/v2", "/openapi/v3", "/version"}}}, {}});
  if (segments[0] == "openapi") {
    if (segments.size() == 2 && segments[1] == "v2") {
      // An empty OpenAPI v2 document (protobuf): kubectl then skips its
      // client-side validation of the kinds it finds none for (kind: List),
      // and the server validates each item itself.
      HandlerResult document = answer({200, nullptr, {}});
      document.raw_body = "";
      document.content_type = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
      return document;
    }
    if (segments.size() == 2 && segments[1] == "v3") return answer({200, openapi_v3_root(types()), {}});
    if (segments.size() >= 3 && segments[1] == "v3") {
      std::string rest;
      for (std::size_t i = 2; i < segments.size(); ++i) rest += (rest.empty() ? "" : "/") + segments[i];
      if (auto document = openapi_v3_document(types(), rest)) return answer({200, *document, {}});
    }
    return answer(not_found_path(request.path));
  }
  std::string group, version;
  std::size_t next = 0;
  if (segments[0] == "api") {
    if (segments.size() == 1) return answer({200, api_versions(address_), {}});
    version = segments[1];
    next = 2;
  } else if (segments[0] == "apis") {
    if (segments.size() == 1) return answer({200, api_group_list(types()), {}});
    group = segments[1];
    if (segments.size() == 2) {
      auto found = api_group(types(), group);
      return answer(found ? ApiResponse{200, *found, {}} : not_found_path(request.path));
    }
    version = segments[2];
    next = 3;
  } else {
    return answer(not_found_path(request.path));
  }
  if (segments.size() == next) {
    auto found = api_resource_list(types(), group, version);
    return answer(found ? ApiResponse{200, *found, {}} : not_found_path(request.path));
  }
  std::vector<std::string> rest(segments.begin() + static_cast<long>(next), segments.end());
  bool watch_path = false;
  if (rest[0] == "watch") {  // the deprecated /watch/ prefix
    watch_path = true;
    rest.erase(rest.begin());
    if (rest.empty()) return answer(not_found_path(request.path));
  }
  (void)method;
  return resource_request(request, user, group, version, std::move(rest), watch_path);
}

HandlerResult ApiHandler::resource_request(const HttpRequest& request, const UserInfo& user, const std::string& group,
                                           const std::string& version, std::vector<std::string> rest,
                                           bool watch_path) const {
  const std::string& method = request.method;
  std::string namespace_;
  if (rest[0] == "namespaces" && rest.size() >= 3 &&
      !(group.empty() && rest.size() == 3 && (rest[2] == "status" || rest[2] == "finalize"))) {
    namespace_ = rest[1];
    rest.erase(rest.begin(), rest.begin() + 2);
  }
  if (rest.size() > 3) return answer(not_found_path(request.path));
  auto type = store_.find_type(group, version, rest[0]);
  if (!type || (!type->namespaced && !namespace_.empty())) return answer(not_found_path(request.path));
  const std::string name = rest.size() > 1 ? rest[1] : "";
  const std::string subresource = rest.size() > 2 ? rest[2] : "";
  const bool known_subresource =
      (subresource == "status" && type->status_subresource) ||
      std::find(type->subresources.begin(), type->subresources.end(), subresource) != type->subresources.end();
  if (!subresource.empty() && !known_subresource) return answer(not_found_path(request.path));
  const Target target{*type, namespace_};
  // The deprecated /watch/ paths serve watches only, as kube-apiserver
  // registers them for GET alone (and RBAC reads them as the verb watch).
  if (watch_path && method != "GET")
    return answer(method_not_allowed("the server does not allow this method on the requested resource"));

  // Answered, never stored.
  if (type->create_only) {
    if (method != "POST" || !name.empty())
      return answer(method_not_allowed("the server does not allow this method on the requested resource"));
    auto body = parse_body(request);
    if (auto* error = std::get_if<ApiResponse>(&body)) return answer(*error);
    return answer(reviews_->create(*type, namespace_, std::get<json>(std::move(body)), user));
  }
  if (subresource == "token") {
    if (method != "POST")
      return answer(method_not_allowed("the server does not allow this method on the requested resource"));
    auto body = parse_body(request);
    if (auto* error = std::get_if<ApiResponse>(&body)) return answer(*error);
    return answer(reviews_->token_request(namespace_, name, std::get<json>(std::move(body))));
  }
  if (subresource == "finalize") {
    if (method != "PUT")
      return answer(method_not_allowed("the server does not allow this method on the requested resource"));
    auto body = parse_body(request);
    if (auto* error = std::get_if<ApiResponse>(&body)) return answer(*error);
    return answer(store_.finalize_namespace(name, std::get<json>(std::move(body))));
  }
  const bool status = subresource == "status";

  WriteOptions write;
  write.dry_run = request.param("dryRun") == "All";
  write.field_validation = request.param("fieldValidation");
  write.field_manager = field_manager(request);
  write.force = request.has_param("force") && query_bool(request.param("force"));

  if (method == "GET") {
    const bool watching = watch_path || (request.has_param("watch") && query_bool(request.param("watch")));
    if (!name.empty() && !watching) {
      ApiResponse got = store_.get(target, name);
      if (got.ok() && wants_table(request)) {
        got.body = to_table(*type, {got.body}, got.body["metadata"].value("resourceVersion", ""), "", now(),
                            include_object(request));
      }
      return answer(got);
    }
    if (auto invalid_options = validate_list_options(request, watching && !watch_path)) return answer(*invalid_options);
    if (request.has_param("limit")) {
      auto limit = parse_int64(request.param("limit"));
      if (auto* error = std::get_if<std::string>(&limit)) return answer(bad_request(*error));
    }
    if (watching) return watch(target, name, request);
    ListOptions list;
    list.label_selector = request.param("labelSelector");
    list.field_selector = request.param("fieldSelector");
    list.resource_version = request.param("resourceVersion");
    list.resource_version_match = request.param("resourceVersionMatch");
    list.continue_token = request.param("continue");
    if (!list.continue_token.empty() && !list.resource_version.empty() && list.resource_version != "0")
      return answer(bad_request("specifying resource version is not allowed when using continue"));
    if (request.has_param("limit")) {
      // A negative limit means no limit, as in kube-apiserver.
      list.limit = std::max<std::int64_t>(0, std::get<std::int64_t>(parse_int64(request.param("limit"))));
    }
    ApiResponse listed = store_.list(target, list);
    if (listed.ok() && wants_table(request)) {
      std::vector<json> items(listed.body["items"].begin(), listed.body["items"].end());
      listed.body = to_table(*type, items, listed.body["metadata"].value("resourceVersion", ""),
                             listed.body["metadata"].value("continue", ""), now(), include_object(request));
    }
    return answer(listed);
  }
  if (method == "POST") {
    if (!name.empty()) return answer(method_not_allowed("POST is not supported on a named resource"));
    if (auto error = validate_write_options(request, "CreateOptions")) return answer(*error);
    auto body = parse_body(request);
    if (auto* error = std::get_if<ApiResponse>(&body)) return answer(*error);
    const json& object = std::get<json>(body);
    if (auto refused = escalation_check(target, string_at(metadata_of(object), "name"), object, user))
      return answer(*refused);
    return answer(store_.create(target, std::get<json>(std::move(body)), write));
  }
  if (method == "PUT") {
    if (name.empty()) return answer(method_not_allowed("PUT needs a resource name"));
    if (auto error = validate_write_options(request, "UpdateOptions")) return answer(*error);
    auto body = parse_body(request);
    if (auto* error = std::get_if<ApiResponse>(&body)) return answer(*error);
    if (auto refused = escalation_check(target, name, std::get<json>(body), user)) return answer(*refused);
    return answer(store_.replace(target, name, std::get<json>(std::move(body)), status, write));
  }
  if (method == "PATCH") {
    if (name.empty()) return answer(method_not_allowed("PATCH needs a resource name"));
    if (auto error = validate_write_options(request, "PatchOptions")) return answer(*error);
    const std::string content_type = request.header("Content-Type");
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
      return answer(unsupported_media_type(
          "the body of the request was in an unknown format - accepted media types include: "
          "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"));
    }
    if (rbac_ && type->group == "rbac.authorization.k8s.io") {
      // The escalation check needs the object as the patch would leave it.
      WriteOptions trial = write;
      trial.dry_run = true;
      ApiResponse patched = store_.patch(target, name, patch_type, request.body, status, trial);
      if (!patched.ok()) return answer(patched);
      if (auto refused = escalation_check(target, name, patched.body, user)) return answer(*refused);
    }
    return answer(store_.patch(target, name, patch_type, request.body, status, write));
  }
  if (method == "DELETE") {
    if (!subresource.empty())
      return answer(method_not_allowed("the server does not allow this method on the requested resource"));
    json options = json::object();
    if (!request.body.empty()) {
      auto body = parse_body(request);
      if (auto* error = std::get_if<ApiResponse>(&body)) return answer(*error);
      options = std::get<json>(std::move(body));
    } else {
      // Query parameters stand in for DeleteOptions only without a body.
      if (request.has_param("propagationPolicy")) options["propagationPolicy"] = request.param("propagationPolicy");
      if (request.has_param("orphanDependents"))
        options["orphanDependents"] = query_bool(request.param("orphanDependents"));
      if (request.has_param("gracePeriodSeconds")) {
        auto seconds = parse_int64(request.param("gracePeriodSeconds"));
        if (auto* error = std::get_if<std::string>(&seconds)) return answer(bad_request(*error));
        options["gracePeriodSeconds"] = std::get<std::int64_t>(seconds);
      }
      for (auto [it, end] = request.query.equal_range("dryRun"); it != end; ++it)
        options["dryRun"].push_back(it->second);
    }
    if (name.empty()) {
      ListOptions list;
      list.label_selector = request.param("labelSelector");
      list.field_selector = request.param("fieldSelector");
      return answer(store_.remove_collection(target, list, options));
    }
    return answer(store_.remove(target, name, options));
  }
  return answer(method_not_allowed(method + " is not supported"));
}

std::optional<ApiResponse> ApiHandler::escalation_check(const Target& target, const std::string& name,
                                                        const json& object, const UserInfo& user) const {
  const ResourceType& type = target.type;
  if (!rbac_ || type.group != "rbac.authorization.k8s.io") return std::nullopt;
  const bool role = type.plural == "roles" || type.plural == "clusterroles";
  const std::string namespace_ = type.namespaced ? target.namespace_ : "";
  json rules;
  if (role) {
    RequestAttributes escalate{true, "escalate", "", type.group, "v1", namespace_, type.plural, "", name};
    if (authorize(user, escalate).allowed) return std::nullopt;
    rules = object.value("rules", json::array());
  } else {
    const json ref = object.value("roleRef", json::object());
    const std::string kind = ref.value("kind", ""), role_name = ref.value("name", "");
    const std::string role_plural = kind == "ClusterRole" ? "clusterroles" : "roles";
    const std::string role_namespace = kind == "ClusterRole" ? "" : namespace_;
    RequestAttributes bind{true, "bind", "", type.group, "v1", namespace_, role_plural, "", role_name};
    if (authorize(user, bind).allowed) return std::nullopt;
    auto role_type = store_.find_type(type.group, "v1", role_plural);
    ApiResponse found = store_.get(Target{*role_type, role_namespace}, role_name);
    if (!found.ok()) return found;
    rules = found.body.value("rules", json::array());
  }
  const std::vector<std::string> missing = rbac_->not_held(user, namespace_, rules);
  if (missing.empty()) return std::nullopt;
  std::string groups;
  for (const std::string& group : user.groups) groups += (groups.empty() ? "\"" : " \"") + group + "\"";
  std::string message = type.plural + "." + type.group + " \"" + name + "\" is forbidden: user \"" + user.name +
                        "\" (groups=[" + groups + "]) is attempting to grant RBAC permissions not currently held:";
  for (const std::string& rule : missing) message += "\n" + rule;
  return ApiResponse{
      403,
      status_body(403, "Forbidden", message, json{{"name", name}, {"group", type.group}, {"kind", type.plural}}),
      {}};
}

HandlerResult ApiHandler::watch(const Target& target, const std::string& name, const HttpRequest& request) const {
  WatchOptions watch_options;
  watch_options.label_selector = request.param("labelSelector");
  watch_options.field_selector = request.param("fieldSelector");
  if (!name.empty()) {  // GET .../name?watch=1 watches one object
    watch_options.field_selector +=
        (watch_options.field_selector.empty() ? "" : ",") + std::string("metadata.name=") + name;
  }
  watch_options.resource_version = request.param("resourceVersion");
  watch_options.allow_bookmarks =
      request.has_param("allowWatchBookmarks") && query_bool(request.param("allowWatchBookmarks"));
  if (request.has_param("sendInitialEvents")) {
    watch_options.send_initial_events = query_bool(request.param("sendInitialEvents"));
  } else if (request.param("resourceVersionMatch").empty() &&
             (watch_options.resource_version.empty() || watch_options.resource_version == "0")) {
    // The WatchList defaulting of 1.32: initial events, then (when
    // bookmarks are allowed) the initial-events-end bookmark.
    watch_options.send_initial_events = true;
  }
  ApiResponse error;
  auto watcher = store_.watch(target, watch_options, error);
  if (!watcher) return answer(error);

  auto deadline = Steady::now() + options_.default_watch_timeout;
  if (request.has_param("timeoutSeconds")) {
    auto seconds = parse_int64(request.param("timeoutSeconds"));
    if (auto* message = std::get_if<std::string>(&seconds)) {
      store_.unwatch(watcher);
      return answer(bad_request(*message));
    }
    const std::int64_t value = std::get<std::int64_t>(seconds);
    // Negative ends the stream at once; 0 means the server's default; the
    // rest is capped at a day so the deadline cannot overflow.
    if (value < 0) deadline = Steady::now();
    if (value > 0) deadline = Steady::now() + std::chrono::seconds(std::min<std::int64_t>(value, 24 * 3600));
  }
  HandlerResult result = answer({200, nullptr, {}});
  result.content_type = "application/json;stream=watch";
  result.watch = WatchStream{
      watcher, deadline, wants_table(request), include_object(request), watch_options.allow_bookmarks, target.type};
  return result;
}

}  // namespace k8s4r::kube_sim
