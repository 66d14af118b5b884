#include "tt/options.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iomanip>

#include "tt/error.h"
#include "tt/yaml_util.h"

namespace tt {

const char* type_name(Type t) {
  switch (t) {
    case Type::Bool: return "a boolean (true/false)";
    case Type::Int: return "an integer";
    case Type::Float: return "a number";
    case Type::String: return "a string";
    case Type::Bytes: return "a size in bytes (e.g. 512MiB, 1.5GiB, 1000000)";
    case Type::List: return "a list";
    case Type::Map: return "a map";
  }
  return "?";
}

// The shortest text that reads back as the same double: 0.001, 1e-8, 0.9, 20.
static std::string number_text(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[32];
  if (v == std::trunc(v) && std::fabs(v) < 1e6) {  // 10, not the shortest form 1e1
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  auto e = s.find('e');  // 1e-08 -> 1e-8
  if (e != std::string::npos) {
    size_t digits = e + 2;
    while (digits + 1 < s.size() && s[digits] == '0') s.erase(digits, 1);
    if (s[e + 1] == '+') s.erase(e + 1, 1);
  }
  return s;
}

bool Range::contains(double v) const {
  if (std::isnan(v)) return !min && !max;
  if (min && (min->inclusive ? v < min->value : v <= min->value)) return false;
  if (max && (max->inclusive ? v > max->value : v >= max->value)) return false;
  return true;
}

std::string Range::text() const {
  if (min && max)
    return detail::cat("in ", min->inclusive ? "[" : "(", number_text(min->value), ", ", number_text(max->value),
                       max->inclusive ? "]" : ")");
  if (min) return detail::cat(min->inclusive ? ">= " : "> ", number_text(min->value));
  if (max) return detail::cat(max->inclusive ? "<= " : "< ", number_text(max->value));
  return "";
}

std::string OptionSpec::allowed() const {
  std::string out;
  for (const auto& c : choices) out += (out.empty() ? "" : " | ") + c;
  return out.empty() ? range.text() : out;
}

namespace detail {
std::string yaml_of(bool v) { return v ? "true" : "false"; }
std::string yaml_of(int64_t v) { return std::to_string(v); }
std::string yaml_of(double v) { return number_text(v); }
std::string yaml_of(const std::string& v) { return emit_yaml_flow(YAML::Node(v)); }
std::string yaml_of(const std::vector<std::string>& v) {
  YAML::Node n(YAML::NodeType::Sequence);
  for (const auto& item : v) n.push_back(item);
  return emit_yaml_flow(n);
}
}  // namespace detail

static std::string check_value(const YAML::Node& n, Type type, const std::string& where, const std::string& what);
static void check_allowed(const OptionSpec& spec, const std::string& yaml, const std::string& where,
                          const std::string& what);

Schema& Schema::add(std::string key, Type type, std::string default_yaml, std::string doc) {
  TT_CHECK(!find(key), "schema: duplicate option '", key, "'");
  OptionSpec spec;
  spec.key = std::move(key);
  spec.type = type;
  spec.default_yaml = std::move(default_yaml);
  spec.doc = std::move(doc);
  check_default(spec);
  specs_.push_back(std::move(spec));
  return *this;
}

Schema& Schema::range(Range a, Range b) {
  TT_CHECK(!specs_.empty(), "schema: range() before any option");
  OptionSpec& spec = specs_.back();
  TT_CHECK(spec.type == Type::Int || spec.type == Type::Float || spec.type == Type::Bytes, "schema: option '",
           spec.key, "' is ", type_name(spec.type), ": only numbers take a range");
  TT_CHECK(!(a.min && b.min) && !(a.max && b.max), "schema: option '", spec.key,
           "': give range() one lower and one upper bound, e.g. range(ge(0), lt(1))");
  // Within what a field's member can hold (set by field()): the tighter bound of each end.
  const std::optional<Bound> lo = a.min ? a.min : b.min, hi = a.max ? a.max : b.max;
  if (lo && (!spec.range.min || lo->value > spec.range.min->value ||
             (lo->value == spec.range.min->value && !lo->inclusive)))
    spec.range.min = lo;
  if (hi && (!spec.range.max || hi->value < spec.range.max->value ||
             (hi->value == spec.range.max->value && !hi->inclusive)))
    spec.range.max = hi;
  TT_CHECK(!spec.range.min || !spec.range.max || spec.range.min->value < spec.range.max->value ||
               (spec.range.min->value == spec.range.max->value && spec.range.min->inclusive &&
                spec.range.max->inclusive),
           "schema: option '", spec.key, "': the range ", spec.range.text(), " is empty");
  check_default(spec);
  return *this;
}

Schema& Schema::validate(std::function<void(const Options&)> check) {
  TT_CHECK(check, "schema: validate() needs a function");
  validations_.push_back(std::move(check));
  return *this;
}

Schema& Schema::architecture() {
  TT_CHECK(!specs_.empty(), "schema: architecture() before any option");
  specs_.back().architecture = true;
  return *this;
}

Schema& Schema::choices(std::vector<std::string> allowed) {
  TT_CHECK(!specs_.empty(), "schema: choices() before any option");
  OptionSpec& spec = specs_.back();
  TT_CHECK(spec.type == Type::String || spec.type == Type::List, "schema: option '", spec.key, "' is ",
           type_name(spec.type), ": only strings and lists take choices");
  TT_CHECK(!allowed.empty(), "schema: option '", spec.key, "': choices() needs at least one value");
  spec.choices = std::move(allowed);
  check_default(spec);
  return *this;
}

// A default that its own declaration does not allow is a bug in the component, not in the
// user's pipeline: say so, as an internal error, when the schema is built.
void Schema::check_default(const OptionSpec& spec) const {
  if (spec.default_yaml.empty() || spec.default_yaml == "~") return;
  const std::string what = "the default of option '" + spec.key + "'";
  try {
    YAML::Node n = YAML::Load(spec.default_yaml);
    check_allowed(spec, check_value(n, spec.type, "schema", what), "schema", what);
  } catch (const YAML::Exception& e) {
    TT_FAIL_AS(Error, "schema: ", what, " is not valid YAML ('", spec.default_yaml, "'): ", e.msg);
  } catch (const ConfigError& e) {
    TT_FAIL_AS(Error, e.what(), " (a bug in the component that declares it)");
  }
}

const OptionSpec* Schema::find(const std::string& key) const {
  for (const auto& s : specs_)
    if (s.key == key) return &s;
  return nullptr;
}

std::vector<std::string> Schema::keys() const {
  std::vector<std::string> out;
  for (const auto& s : specs_) out.push_back(s.key);
  return out;
}

static bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno == 0 && *end == '\0') {
    out = v;
    return true;
  }
  double d = std::strtod(s.c_str(), &end);  // accept 1e6, 2.0
  if (*end == '\0' && std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
    out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

static bool parse_float(const std::string& s, double& out) {
  if (s.empty()) return false;
  std::string t = s;
  std::transform(t.begin(), t.end(), t.begin(), ::tolower);
  if (t == ".inf" || t == "inf") return out = INFINITY, true;
  if (t == "-.inf" || t == "-inf") return out = -INFINITY, true;
  if (t == ".nan" || t == "nan") return out = NAN, true;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return *end == '\0';
}

static bool parse_bool(const std::string& s, bool& out) {
  std::string t = s;
  std::transform(t.begin(), t.end(), t.begin(), ::tolower);
  if (t == "true" || t == "yes" || t == "on") return out = true, true;
  if (t == "false" || t == "no" || t == "off") return out = false, true;
  return false;
}

// Checks one YAML value against a type; returns canonical YAML text or throws.
static std::string check_value(const YAML::Node& n, Type type, const std::string& where, const std::string& what) {
  auto bad = [&](const std::string& got) -> std::string {
    TT_FAIL_AS(ConfigError, where, ": ", what, " must be ", type_name(type), ", got ", got);
  };
  auto shown = [&]() { return n.IsScalar() ? "'" + n.Scalar() + "'" : (n.IsSequence() ? "a list" : "a map"); };
  switch (type) {
    case Type::Bool: {
      bool b;
      if (!n.IsScalar() || !parse_bool(n.Scalar(), b)) bad(shown());
      return b ? "true" : "false";
    }
    case Type::Int: {
      int64_t v;
      if (!n.IsScalar() || !parse_int(n.Scalar(), v)) bad(shown());
      return std::to_string(v);
    }
    case Type::Float: {
      double v;
      if (!n.IsScalar() || !parse_float(n.Scalar(), v)) bad(shown());
      // .inf, .nan and what overflows a double (1e400) are no setting of any option
      if (!std::isfinite(v)) TT_FAIL_AS(ConfigError, where, ": ", what, " must be a finite number, got ", shown());
      return n.Scalar();
    }
    case Type::String:
      if (!n.IsScalar()) bad(shown());
      return emit_yaml(n);
    case Type::Bytes:
      if (!n.IsScalar()) bad(shown());
      try {
        parse_bytes(n.Scalar());
      } catch (const ConfigError& e) {
        TT_FAIL_AS(ConfigError, where, ": ", what, ": ", e.what());
      }
      return n.Scalar();
    case Type::List:
      if (n.IsScalar()) {  // one value: a list of it (emitted as a list, so "a{b" is quoted in the brackets)
        YAML::Node list(YAML::NodeType::Sequence);
        list.push_back(n);
        return emit_yaml_flow(list);
      }
      if (!n.IsSequence()) bad(shown());
      for (const auto& item : n)
        if (!item.IsScalar()) TT_FAIL_AS(ConfigError, where, ": ", what, " must be a list of plain values");
      return emit_yaml_flow(n);
    case Type::Map:
      if (!n.IsMap()) bad(shown());
      return emit_yaml_flow(n);
  }
  return {};
}

// Checks a valid value of the spec's type (canonical YAML text) against its range or choices.
static void check_allowed(const OptionSpec& spec, const std::string& yaml, const std::string& where,
                          const std::string& what) {
  if (spec.range.min || spec.range.max) {
    double v = 0;
    if (spec.type == Type::Bytes) v = static_cast<double>(parse_bytes(yaml));
    else parse_float(yaml, v);
    if (!spec.range.contains(v)) TT_FAIL_AS(ConfigError, where, ": ", what, " must be ", spec.range.text(), ", got ", yaml);
  }
  if (spec.choices.empty()) return;
  YAML::Node n = YAML::Load(yaml);
  std::vector<std::string> given;
  if (n.IsSequence())
    for (const auto& item : n) given.push_back(item.Scalar());
  else
    given.push_back(n.Scalar());
  for (const auto& g : given) {
    if (std::find(spec.choices.begin(), spec.choices.end(), g) != spec.choices.end()) continue;
    std::string msg = detail::cat(where, ": ", what, spec.type == Type::List ? " items" : "", " must be one of ",
                                  spec.allowed(), ", got '", g, "'");
    const std::string near = nearest(g, spec.choices);
    if (!near.empty()) msg += "; did you mean '" + near + "'?";
    throw ConfigError(msg);
  }
}

Options Options::defaults(const Schema& schema, const std::string& context) {
  return parse(YAML::Node(), schema, context, "");
}

Options Options::parse(const YAML::Node& node, const Schema& schema, const std::string& context,
                       const std::string& file, const std::vector<std::string>& ignore,
                       const std::map<std::string, std::string>& origins) {
  Options o;
  auto where = [&](const std::string& key, const YAML::Node& n) {
    auto it = origins.find(key);
    return it != origins.end() ? it->second : location(file, n);
  };
  o.context_ = context;
  const std::string prefix = context.empty() ? "" : context + ".";
  if (node.IsDefined() && !node.IsNull()) {
    if (!node.IsMap())
      TT_FAIL_AS(ConfigError, where("", node), ": ", context, " must be a map of options (key: value), got ",
              node.IsSequence() ? "a list" : "'" + node.Scalar() + "'");
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (std::find(ignore.begin(), ignore.end(), key) != ignore.end()) continue;
      if (!schema.find(key)) {
        std::string msg = detail::cat(where(key, it->first), ": unknown key '", key, "' in ", context);
        std::string near = nearest(key, schema.keys());
        if (!near.empty()) msg += detail::cat("; did you mean '", near, "'?");
        std::string valid;
        for (const auto& k : schema.keys()) valid += (valid.empty() ? "" : ", ") + k;
        msg += valid.empty() ? " (it takes no options)" : " (valid keys: " + valid + ")";
        throw UnknownKeyError(msg);
      }
    }
  }
  for (const auto& spec : schema.specs()) {
    Value v;
    v.type = spec.type;
    YAML::Node n = (node.IsDefined() && node.IsMap()) ? node[spec.key] : YAML::Node();
    if (n.IsDefined() && !n.IsNull()) {
      v.where = where(spec.key, n);
      v.yaml = check_value(n, spec.type, v.where, prefix + spec.key);
      check_allowed(spec, v.yaml, v.where, prefix + spec.key);
      v.null = false;
    } else {
      // not given: a refusal points to the section (its file alone where the command line set
      // some of it); the message names the option
      const auto origin = origins.find(spec.key);  // set to ~ on the command line
      v.where = origin != origins.end() ? origin->second
                : origins.empty()       ? location(file, node)
                                        : (file.empty() ? "<pipeline>" : file);
      const bool has_default = spec.default_yaml != "~" && !spec.default_yaml.empty();
      v.yaml = has_default ? check_value(YAML::Load(spec.default_yaml), spec.type, v.where, prefix + spec.key) : "~";
      v.null = !has_default;
    }
    o.order_.push_back(spec.key);
    o.values_[spec.key] = std::move(v);
    if (spec.field) o.fields_.push_back(spec.field);
  }
  for (const auto& check : schema.validations()) check(o);
  return o;
}

const Options::Value& Options::value(const std::string& key, Type expected) const {
  auto it = values_.find(key);
  TT_CHECK(it != values_.end(), "internal: option '", key, "' is not in the schema of ", context_);
  TT_CHECK(it->second.type == expected || (expected == Type::String && it->second.type != Type::List),
           "internal: option ", context_, ".", key, " is ", type_name(it->second.type), ", read as ",
           type_name(expected));
  TT_CHECK_AS(ConfigError, !it->second.null, context_, ".", key, " is not set and has no default: set it in the pipeline");
  return it->second;
}

bool Options::is_set(const std::string& key) const {
  auto it = values_.find(key);
  return it != values_.end() && !it->second.null;
}

bool Options::get_bool(const std::string& key) const { return value(key, Type::Bool).yaml == "true"; }
int64_t Options::get_int(const std::string& key) const {
  int64_t v = 0;
  parse_int(value(key, Type::Int).yaml, v);
  return v;
}
double Options::get_float(const std::string& key) const {
  double v = 0;
  parse_float(value(key, Type::Float).yaml, v);
  return v;
}
std::string Options::get_string(const std::string& key) const {
  const Value& v = value(key, Type::String);
  if (v.type == Type::String) return YAML::Load(v.yaml).Scalar();
  return v.yaml;
}
int64_t Options::get_bytes(const std::string& key) const { return parse_bytes(value(key, Type::Bytes).yaml); }
std::vector<std::string> Options::get_list(const std::string& key) const {
  std::vector<std::string> out;
  for (const auto& item : YAML::Load(value(key, Type::List).yaml)) out.push_back(item.Scalar());
  return out;
}
std::string Options::get_yaml(const std::string& key) const {
  auto it = values_.find(key);
  TT_CHECK(it != values_.end(), "internal: option '", key, "' is not in the schema of ", context_);
  return it->second.yaml;
}

void Options::fill(void* object, const std::type_info& type) const {
  bool any = false;
  for (const auto& f : fields_) {
    if (f->owner != std::type_index(type)) continue;  // a field of another struct of the same schema
    f->assign(object, *this);
    any = true;
  }
  TT_CHECK(any, "internal: the schema of ", context_, " binds no field of the struct asked for (declare them with "
           "Schema::field)");
}

void Options::fail(const std::string& key, const std::string& message) const {
  auto it = values_.find(key);
  std::string where = it == values_.end() ? context_ : it->second.where;
  TT_FAIL_AS(ConfigError, where, ": ", context_.empty() ? "" : context_ + ".", key, " ", message);
}

std::vector<std::pair<std::string, std::string>> Options::resolved() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& k : order_) out.emplace_back(k, values_.at(k).yaml);
  return out;
}

}  // namespace tt
