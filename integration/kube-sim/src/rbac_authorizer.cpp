#include "k8s4r/kube_sim/rbac_authorizer.h"

#include "store_util.h"

#include <algorithm>

namespace k8s4r::kube_sim {

using nlohmann::json;

namespace {

std::vector<std::string> strings(const json& rule, const char* key) {
  std::vector<std::string> values;
  if (rule.is_object() && rule.contains(key) && rule[key].is_array()) {
    for (const json& value : rule[key]) {
      if (value.is_string()) values.push_back(value.get<std::string>());
    }
  }
  return values;
}

bool any_equal(const std::vector<std::string>& values, const std::string& wanted) {
  return std::any_of(values.begin(), values.end(),
                     [&](const std::string& value) { return value == "*" || value == wanted; });
}

// rbac/v1 evaluation_helpers.go: ResourceMatches.
bool resource_matches(const std::vector<std::string>& resources, const std::string& combined,
                      const std::string& subresource) {
  for (const std::string& resource : resources) {
    if (resource == "*" || resource == combined) return true;
    if (!subresource.empty() && resource.size() == subresource.size() + 2 && resource.rfind("*/", 0) == 0 &&
        resource.compare(2, std::string::npos, subresource) == 0)
      return true;
  }
  return false;
}

bool non_resource_matches(const std::vector<std::string>& urls, const std::string& path) {
  for (const std::string& url : urls) {
    if (url == "*" || url == path) return true;
    if (!url.empty() && url.back() == '*' && path.rfind(url.substr(0, url.size() - 1), 0) == 0) return true;
  }
  return false;
}

bool rule_allows(const RequestAttributes& attributes, const json& rule) {
  if (!any_equal(strings(rule, "verbs"), attributes.verb)) return false;
  if (!attributes.resource_request) return non_resource_matches(strings(rule, "nonResourceURLs"), attributes.path);
  if (!any_equal(strings(rule, "apiGroups"), attributes.api_group)) return false;
  const std::string combined =
      attributes.subresource.empty() ? attributes.resource : attributes.resource + "/" + attributes.subresource;
  if (!resource_matches(strings(rule, "resources"), combined, attributes.subresource)) return false;
  const std::vector<std::string> names = strings(rule, "resourceNames");
  return names.empty() || std::find(names.begin(), names.end(), attributes.name) != names.end();
}

// appliesToUser, and how the allow reason names the subject.
std::optional<std::string> matching_subject(const UserInfo& user, const json& binding,
                                            const std::string& binding_namespace) {
  if (!binding.contains("subjects") || !binding["subjects"].is_array()) return std::nullopt;
  for (const json& subject : binding["subjects"]) {
    if (!subject.is_object()) continue;
    const std::string kind = string_at(subject, "kind"), name = string_at(subject, "name");
    if (kind == "User" && user.name == name) return "User \"" + name + "\"";
    if (kind == "Group" && std::find(user.groups.begin(), user.groups.end(), name) != user.groups.end())
      return "Group \"" + name + "\"";
    if (kind == "ServiceAccount") {
      const std::string namespace_ = subject.contains("namespace") && subject["namespace"].is_string()
                                         ? subject["namespace"].get<std::string>()
                                         : binding_namespace;
      if (namespace_.empty()) continue;
      if (user.name == "system:serviceaccount:" + namespace_ + ":" + name)
        return "ServiceAccount \"" + name + "/" + namespace_ + "\"";
    }
  }
  return std::nullopt;
}

std::string escape_html(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else {
      out += c;
    }
  }
  return out;
}

json role(const std::string& name, json rules) {
  return {{"apiVersion", "rbac.authorization.k8s.io/v1"},
          {"kind", "ClusterRole"},
          {"metadata",
           {{"name", name},
            {"labels", {{"kubernetes.io/bootstrapping", "rbac-defaults"}}},
            {"annotations", {{"rbac.authorization.kubernetes.io/autoupdate", "true"}}}}},
          {"rules", std::move(rules)}};
}

json binding(const std::string& name, const std::vector<std::string>& groups) {
  json subjects = json::array();
  for (const std::string& group : groups)
    subjects.push_back({{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "Group"}, {"name", group}});
  return {{"apiVersion", "rbac.authorization.k8s.io/v1"},
          {"kind", "ClusterRoleBinding"},
          {"metadata",
           {{"name", name},
            {"labels", {{"kubernetes.io/bootstrapping", "rbac-defaults"}}},
            {"annotations", {{"rbac.authorization.kubernetes.io/autoupdate", "true"}}}}},
          {"roleRef", {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "ClusterRole"}, {"name", name}}},
          {"subjects", subjects}};
}

}  // namespace

RequestAttributes request_attributes(const std::string& method, const std::string& path,
                                     const std::multimap<std::string, std::string>& query) {
  RequestAttributes attributes;
  attributes.path = path;
  attributes.verb = lowercase(method);
  std::vector<std::string> parts = split_path(path);
  const auto param = [&](const char* key) -> std::optional<std::string> {
    auto it = query.find(key);
    if (it == query.end()) return std::nullopt;
    return it->second;
  };
  if (parts.empty() || (parts[0] != "api" && parts[0] != "apis")) return attributes;
  const bool core = parts[0] == "api";
  if (parts.size() < (core ? 3u : 4u)) return attributes;  // discovery paths are non-resource
  attributes.resource_request = true;
  std::size_t at = 1;
  if (!core) attributes.api_group = parts[at++];
  attributes.api_version = parts[at++];
  std::vector<std::string> rest(parts.begin() + static_cast<long>(at), parts.end());
  static const std::map<std::string, std::string> kVerbs = {
      {"POST", "create"}, {"GET", "get"}, {"HEAD", "get"}, {"PUT", "update"}, {"PATCH", "patch"}, {"DELETE", "delete"}};
  auto verb = kVerbs.find(method);
  attributes.verb = verb == kVerbs.end() ? "" : verb->second;
  if (!rest.empty() && rest[0] == "watch") {
    attributes.verb = "watch";
    rest.erase(rest.begin());
  }
  if (!rest.empty() && rest[0] == "namespaces" && rest.size() > 1) {
    attributes.namespace_ = rest[1];
    if (rest.size() > 2 && rest[2] != "status" && rest[2] != "finalize") rest.erase(rest.begin(), rest.begin() + 2);
  }
  if (!rest.empty()) attributes.resource = rest[0];
  if (rest.size() > 1) attributes.name = rest[1];
  if (rest.size() > 2) attributes.subresource = rest[2];
  if (attributes.name.empty() && attributes.verb == "get") {
    const auto watch = param("watch");
    const bool watching = watch && *watch != "0" && lowercase(*watch) != "false";
    attributes.verb = watching ? "watch" : "list";
  }
  if (attributes.name.empty() && attributes.verb == "delete") attributes.verb = "deletecollection";
  if (attributes.verb == "list" || attributes.verb == "watch") {
    // A list or watch of one name (fieldSelector=metadata.name=X) names it.
    if (auto selector = param("fieldSelector")) {
      const std::string prefix = "metadata.name=";
      if (selector->rfind(prefix, 0) == 0 && selector->find(',') == std::string::npos) {
        std::string name = selector->substr(prefix.size());
        if (!name.empty() && name[0] == '=') name.erase(0, 1);
        if (!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..") attributes.name = name;
      }
    }
  }
  return attributes;
}

void RbacAuthorizer::visit_rules(const UserInfo& user, const std::string& namespace_,
                                 const std::function<bool(const json& rule, const std::string& source)>& visit,
                                 std::vector<std::string>& errors) const {
  const auto rules_of = [&](const json& binding, const std::string& binding_namespace) -> std::optional<json> {
    const json ref =
        binding.contains("roleRef") && binding["roleRef"].is_object() ? binding["roleRef"] : json::object();
    const std::string kind = string_at(ref, "kind"), name = string_at(ref, "name");
    std::optional<json> role_object;
    if (kind == "ClusterRole") {
      role_object = source_.get("clusterroles", "", name);
      if (!role_object) errors.push_back("clusterrole.rbac.authorization.k8s.io \"" + name + "\" not found");
    } else if (kind == "Role" && !binding_namespace.empty()) {
      role_object = source_.get("roles", binding_namespace, name);
      if (!role_object) errors.push_back("role.rbac.authorization.k8s.io \"" + name + "\" not found");
    } else {
      errors.push_back("unsupported role reference kind: \"" + kind + "\"");
    }
    if (!role_object) return std::nullopt;
    return role_object->value("rules", json::array());
  };
  for (const json& binding : source_.list("clusterrolebindings", "")) {
    auto subject = matching_subject(user, binding, "");
    if (!subject) continue;
    auto rules = rules_of(binding, "");
    if (!rules) continue;
    const std::string source = "ClusterRoleBinding \"" + string_at(metadata_of(binding), "name") +
                               "\" of ClusterRole \"" + string_at(object_at(binding, "roleRef"), "name") + "\" to " +
                               *subject;
    for (const json& rule : *rules) {
      if (visit(rule, source)) return;
    }
  }
  if (namespace_.empty()) return;
  for (const json& binding : source_.list("rolebindings", namespace_)) {
    auto subject = matching_subject(user, binding, namespace_);
    if (!subject) continue;
    auto rules = rules_of(binding, namespace_);
    if (!rules) continue;
    const std::string source = "RoleBinding \"" + string_at(metadata_of(binding), "name") + "/" + namespace_ +
                               "\" of " + string_at(object_at(binding, "roleRef"), "kind") + " \"" +
                               string_at(object_at(binding, "roleRef"), "name") + "\" to " + *subject;
    for (const json& rule : *rules) {
      if (visit(rule, source)) return;
    }
  }
}

Decision RbacAuthorizer::authorize(const UserInfo& user, const RequestAttributes& attributes) const {
  if (std::find(user.groups.begin(), user.groups.end(), "system:masters") != user.groups.end()) return {true, ""};
  Decision decision;
  std::vector<std::string> errors;
  visit_rules(
      user, attributes.resource_request ? attributes.namespace_ : "",
      [&](const json& rule, const std::string& source) {
        if (!rule_allows(attributes, rule)) return false;
        decision = {true, "RBAC: allowed by " + source};
        return true;
      },
      errors);
  if (!decision.allowed && !errors.empty()) {
    std::string joined;
    for (const std::string& error : errors) joined += (joined.empty() ? "" : ", ") + error;
    decision.reason = "RBAC: " + (errors.size() > 1 ? "[" + joined + "]" : joined);
  }
  return decision;
}

std::vector<std::string> RbacAuthorizer::not_held(const UserInfo& user, const std::string& namespace_,
                                                  const json& rules) const {
  std::vector<std::string> missing;
  if (std::find(user.groups.begin(), user.groups.end(), "system:masters") != user.groups.end()) return missing;
  if (!rules.is_array()) return missing;
  // Each requested rule in single atoms (verb, group, resource, name), each
  // of which some rule the user holds must allow, as rbac Covers does.
  // The user's rules are read once (each read lists the bindings and looks
  // their roles up); every atom is then checked against them in memory.
  std::vector<json> held;
  std::vector<std::string> errors;
  visit_rules(
      user, namespace_,
      [&](const json& rule, const std::string&) {
        held.push_back(rule);
        return false;
      },
      errors);
  const auto holds = [&](const RequestAttributes& atom) {
    return std::any_of(held.begin(), held.end(), [&](const json& rule) { return rule_allows(atom, rule); });
  };
  for (const json& rule : rules) {
    bool covered = true;
    for (const std::string& verb : strings(rule, "verbs")) {
      for (const std::string& url : strings(rule, "nonResourceURLs")) {
        RequestAttributes atom;
        atom.verb = verb;
        atom.path = url;
        covered = covered && holds(atom);
      }
      for (const std::string& group : strings(rule, "apiGroups")) {
        for (const std::string& resource : strings(rule, "resources")) {
          std::vector<std::string> names = strings(rule, "resourceNames");
          if (names.empty()) names.push_back("");
          for (const std::string& name : names) {
            RequestAttributes atom;
            atom.resource_request = true;
            atom.verb = verb;
            atom.api_group = group;
            const std::size_t slash = resource.find('/');
            atom.resource = resource.substr(0, slash);
            if (slash != std::string::npos) atom.subresource = resource.substr(slash + 1);
            atom.name = name;
            covered = covered && holds(atom);
          }
        }
      }
    }
    if (covered) continue;
    // CompactString: the non-empty fields, each a Go %q list.
    std::string text = "{";
    bool first = true;
    for (const auto& [key, label] :
         std::vector<std::pair<const char*, const char*>>{{"apiGroups", "APIGroups"},
                                                          {"resources", "Resources"},
                                                          {"nonResourceURLs", "NonResourceURLs"},
                                                          {"resourceNames", "ResourceNames"},
                                                          {"verbs", "Verbs"}}) {
      const std::vector<std::string> values = strings(rule, key);
      if (values.empty()) continue;
      text += std::string(first ? "" : ", ") + label + ":[";
      for (std::size_t i = 0; i < values.size(); ++i) text += (i ? " \"" : "\"") + values[i] + "\"";
      text += "]";
      first = false;
    }
    missing.push_back(text + "}");
  }
  return missing;
}

json RbacAuthorizer::rules_review(const UserInfo& user, const std::string& namespace_) const {
  json resource_rules = json::array(), non_resource_rules = json::array();
  std::vector<std::string> errors;
  if (std::find(user.groups.begin(), user.groups.end(), "system:masters") != user.groups.end()) {
    resource_rules.push_back({{"verbs", {"*"}}, {"apiGroups", {"*"}}, {"resources", {"*"}}});
    non_resource_rules.push_back({{"verbs", {"*"}}, {"nonResourceURLs", {"*"}}});
  }
  visit_rules(
      user, namespace_,
      [&](const json& rule, const std::string&) {
        if (rule.contains("nonResourceURLs") && !rule["nonResourceURLs"].empty()) {
          non_resource_rules.push_back(
              {{"verbs", list_at(rule, "verbs")}, {"nonResourceURLs", rule["nonResourceURLs"]}});
        } else {
          json entry = {{"verbs", list_at(rule, "verbs")}};
          for (const char* key : {"apiGroups", "resources", "resourceNames"}) {
            if (rule.contains(key) && !rule[key].empty()) entry[key] = rule[key];
          }
          resource_rules.push_back(entry);
        }
        return false;
      },
      errors);
  json status = {{"resourceRules", resource_rules}, {"nonResourceRules", non_resource_rules}, {"incomplete", false}};
  if (!errors.empty()) {
    std::string joined;
    for (const std::string& error : errors) joined += (joined.empty() ? "" : ", ") + error;
    status["evaluationError"] = errors.size() > 1 ? "[" + joined + "]" : joined;
  }
  return status;
}

ApiResponse forbidden(const UserInfo& user, const RequestAttributes& attributes, const std::string& reason) {
  std::string message;
  json details = json::object();
  if (!attributes.resource_request) {
    message = "forbidden: User \"" + user.name + "\" cannot " + attributes.verb + " path \"" + attributes.path + "\"";
  } else {
    const std::string resource =
        attributes.subresource.empty() ? attributes.resource : attributes.resource + "/" + attributes.subresource;
    std::string what = "User \"" + user.name + "\" cannot " + attributes.verb + " resource \"" + resource +
                       "\" in API group \"" + attributes.api_group + "\"";
    what +=
        attributes.namespace_.empty() ? " at the cluster scope" : " in the namespace \"" + attributes.namespace_ + "\"";
    const std::string qualified =
        attributes.api_group.empty() ? attributes.resource : attributes.resource + "." + attributes.api_group;
    message = qualified + (attributes.name.empty() ? "" : " \"" + attributes.name + "\"") + " is forbidden: " + what;
    if (!attributes.name.empty()) details["name"] = attributes.name;
    if (!attributes.api_group.empty()) details["group"] = attributes.api_group;
    details["kind"] = attributes.resource;
  }
  message = escape_html(message);
  if (!reason.empty()) message += ": " + reason;
  return {403, status_body(403, "Forbidden", message, details), {}};
}

std::vector<json> bootstrap_policy() {
  const json discovery_paths = {"/api",     "/api/*",     "/apis",   "/apis/*",  "/healthz", "/livez",
                                "/openapi", "/openapi/*", "/readyz", "/version", "/version/"};
  return {
      role("cluster-admin", {{{"apiGroups", {"*"}}, {"resources", {"*"}}, {"verbs", {"*"}}},
                             {{"nonResourceURLs", {"*"}}, {"verbs", {"*"}}}}),
      binding("cluster-admin", {"system:masters"}),
      role("system:discovery", {{{"nonResourceURLs", discovery_paths}, {"verbs", {"get"}}}}),
      binding("system:discovery", {"system:authenticated"}),
      role("system:basic-user",
           {{{"apiGroups", {"authorization.k8s.io"}},
             {"resources", {"selfsubjectaccessreviews", "selfsubjectrulesreviews"}},
             {"verbs", {"create"}}},
            {{"apiGroups", {"authentication.k8s.io"}}, {"resources", {"selfsubjectreviews"}}, {"verbs", {"create"}}}}),
      binding("system:basic-user", {"system:authenticated"}),
      role("system:public-info-viewer",
           {{{"nonResourceURLs", {"/healthz", "/livez", "/readyz", "/version", "/version/"}}, {"verbs", {"get"}}}}),
      binding("system:public-info-viewer", {"system:authenticated", "system:unauthenticated"}),
  };
}

}  // namespace k8s4r::kube_sim
