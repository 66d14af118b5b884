#pragma once
// Typed options with documented defaults, ranges and choices, validated from YAML.
//
// Every component (model, dataset, plugin, optimizer, schedule, the trainer itself)
// declares a Schema: one declaration per option gives its key, type, default, allowed
// range or choices, and a one-line doc. Options::parse checks a YAML map against it: an
// unknown key is an error naming the file, line:column and the nearest valid key; a wrong
// type names the expected type; a value outside the range or choices names them and the
// value given. tt-run --list prints schemas, --dry-run prints the resolved values.
//
// A component with an options struct binds its fields in the declaration, so that the
// default is written once, there:
//
//   struct SgdOptions { double lr; bool nesterov; };
//   Schema s = Schema()
//       .field("lr", &SgdOptions::lr, 0.01, "learning rate").range(ge(0))
//       .field("nesterov", &SgdOptions::nesterov, false, "Nesterov momentum");
//   SgdOptions o = Options::parse(node, s, ...).to<SgdOptions>();
//
// Where a library's struct keeps its defaults next to its fields (as PyTorch's Options structs
// do), the declaration takes the default from there instead of repeating it:
//   .field("init_scale", &GradScaler::Options::init_scale, GradScaler::Options{}.init_scale, "...")
//
// A field of type std::optional<T> is unset ("~") when its default is std::nullopt.
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeindex>
#include <vector>

#include "tt/export.h"

namespace YAML {
class Node;
}

namespace tt {

enum class Type { Bool, Int, Float, String, Bytes, List, Map };
TT_API const char* type_name(Type t);

class Options;
namespace detail {
template <class M>
struct Same {  // keeps a default's type from taking part in deduction: field("k", &S::n, 0, ...)
  using type = M;
};
}  // namespace detail

// One end of an allowed numeric range.
struct Bound {
  double value;
  bool inclusive;
};
// An allowed numeric range; build one with ge/gt/le/lt, e.g. range(ge(0), lt(1)).
struct TT_API Range {
  std::optional<Bound> min, max;
  bool contains(double v) const;  // NaN is never inside a range
  std::string text() const;       // ">= 0", "> 0", "in [0, 1)"
};
inline Range ge(double v) { return {Bound{v, true}, std::nullopt}; }
inline Range gt(double v) { return {Bound{v, false}, std::nullopt}; }
inline Range le(double v) { return {std::nullopt, Bound{v, true}}; }
inline Range lt(double v) { return {std::nullopt, Bound{v, false}}; }

// Fills one member of an options struct from resolved Options (see Schema::field).
struct FieldBinding {
  std::type_index owner;
  std::function<void(void* object, const Options& options)> assign;
};

struct TT_API OptionSpec {
  std::string key;
  Type type;
  std::string default_yaml;  // YAML text of the default; "~" means unset
  std::string doc;
  Range range;                            // Int, Float, Bytes: the allowed values
  std::vector<std::string> choices;       // String, or each item of a List: the allowed values
  std::shared_ptr<const FieldBinding> field;  // set by Schema::field
  bool architecture = false;              // Schema::architecture: what a model's weights mean depends on it
  // What the value may be, for --list and messages: "", ">= 0", "in [0, 1)", "error | skip".
  std::string allowed() const;
};

class TT_API Schema {
 public:
  // Declares an option. Its default is checked here: a default that is not of the type, or
  // (with range/choices below) not allowed, is a programming error and throws tt::Error.
  Schema& add(std::string key, Type type, std::string default_yaml, std::string doc);
  // Declares an option bound to a member of an options struct (Options::to fills it). The
  // type follows the member: bool, an integer, double, std::string, std::vector<std::string>,
  // or std::optional of one of them.
  template <class T, class M>
  Schema& field(std::string key, M T::*member, const typename detail::Same<M>::type& default_value,
                std::string doc);
  // As field, for a size in bytes held in an int64_t (or std::optional<int64_t>); the default
  // is written as text: "1.5GiB", "512MiB", or "~".
  template <class T, class M>
  Schema& bytes_field(std::string key, M T::*member, std::string default_yaml, std::string doc);
  // Constrain the option declared last; its default is checked at once.
  // A field's range starts as what its member can hold (an int32_t's, a float's); range()
  // narrows it.
  Schema& range(Range a, Range b = {});  // range(gt(0)), range(ge(0), lt(1))
  Schema& choices(std::vector<std::string> allowed);
  // Marks the option declared last (a model's) as one that what the weights mean depends on,
  // shapes aside: n_heads splits the same d_model-wide tensors otherwise. model.init_from refuses
  // weights whose record (a checkpoint's, a safetensors export's) gives it another value.
  Schema& architecture();
  // A check of the options taken together (one against another: n_heads divides d_model), run
  // by Options::parse once each value is read. So the pipeline's reading refuses what the
  // component would refuse when built (--dry-run, a comparison's variants, the planner), before
  // any data is read. It reports with Options::check / fail, naming the option at fault:
  //   .validate([](const Options& o) { o.check(o.get_int("lo") <= o.get_int("hi"), "lo", "must be at most hi"); })
  // What needs the data (a vocabulary's size) stays in the component's factory.
  Schema& validate(std::function<void(const Options&)> check);

  const std::vector<OptionSpec>& specs() const { return specs_; }
  const std::vector<std::function<void(const Options&)>>& validations() const { return validations_; }
  const OptionSpec* find(const std::string& key) const;
  std::vector<std::string> keys() const;

 private:
  void check_default(const OptionSpec& spec) const;
  std::vector<OptionSpec> specs_;
  std::vector<std::function<void(const Options&)>> validations_;
};

// Where a value came from, for error messages: "configs/x.yaml:12:5" or "command line 'k=v'".
struct Location {
  std::string text;
};

// Resolved, typed values of one component. Cheap to copy.
class TT_API Options {
 public:
  Options() = default;
  // Validates `node` (a YAML map, or null for "all defaults") against `schema`.
  // `context` names the section in messages (e.g. "trainer" or "plugins[1] (amp)");
  // `ignore` lists keys consumed by the caller (e.g. "name"); `origins` names keys that
  // came from the command line (key -> "command line 'trainer.lr=1'") for messages; key ""
  // is the section itself (trainer=5).
  static Options parse(const YAML::Node& node, const Schema& schema, const std::string& context,
                       const std::string& file, const std::vector<std::string>& ignore = {},
                       const std::map<std::string, std::string>& origins = {});
  static Options defaults(const Schema& schema, const std::string& context);

  bool is_set(const std::string& key) const;  // present and not null
  bool get_bool(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  int64_t get_bytes(const std::string& key) const;
  std::vector<std::string> get_list(const std::string& key) const;
  std::string get_yaml(const std::string& key) const;  // raw YAML text (Map or anything)

  // The options struct whose fields the schema bound (Schema::field), filled from these values.
  // A schema may bind fields of several structs (a plugin's own and a library's); each to<T>()
  // fills the fields of T.
  template <class T>
  T to() const {
    T out{};
    fill(&out, typeid(T));
    return out;
  }

  // Throws tt::ConfigError (exit 2) "<location>: <context>.<key> <message>" (for range checks).
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  void check(bool ok, const std::string& key, const std::string& message) const {
    if (!ok) fail(key, message);
  }
  const std::string& context() const { return context_; }
  // All keys with their resolved YAML text, schema order; for --dry-run and the run dir.
  std::vector<std::pair<std::string, std::string>> resolved() const;

 private:
  struct Value {
    Type type = Type::String;
    bool null = true;
    std::string yaml;  // canonical YAML text
    std::string where;
  };
  const Value& value(const std::string& key, Type expected) const;
  void fill(void* object, const std::type_info& type) const;
  std::string context_;
  std::vector<std::string> order_;
  std::map<std::string, Value> values_;
  std::vector<std::shared_ptr<const FieldBinding>> fields_;
};

// Parses "1.5GiB", "512MiB", "100MB", "4096", "1e9" into bytes; throws tt::Error otherwise.
TT_API int64_t parse_bytes(const std::string& text);
// A memory budget: a positive size written without spaces ("1.5GiB", "512MiB", "2GB"); "1.5 GB"
// and "abc" are refused with the forms that work.
TT_API int64_t parse_budget(const std::string& text);
TT_API std::string format_bytes(int64_t bytes);  // "1.50 GiB"
// Bytes in MiB as a bare number for tables: format_mib(1572864) == "1.5", format_mib(b, 2) == "1.50";
// one those decimals would show as 0 keeps 3 significant digits: format_mib(8000) == "0.00763".
TT_API std::string format_mib(double bytes, int decimals = 1);
// Levenshtein-nearest candidate, or "" if nothing is reasonably close.
TT_API std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

namespace detail {
// The YAML text of a C++ default, and the option type of a member.
TT_API std::string yaml_of(bool v);
TT_API std::string yaml_of(int64_t v);
TT_API std::string yaml_of(double v);
TT_API std::string yaml_of(const std::string& v);
TT_API std::string yaml_of(const std::vector<std::string>& v);

template <class M>
struct FieldType {
  static_assert(std::is_arithmetic<M>::value, "an option field is bool, an integer, double, std::string, "
                                              "std::vector<std::string>, or std::optional of one of them");
  static constexpr Type type = std::is_same<M, bool>::value ? Type::Bool
                               : std::is_integral<M>::value ? Type::Int
                                                            : Type::Float;
  // The values the member can hold, as the option's range (none where an int64_t or a double
  // holds them all): a value outside is refused when read, naming the range, not narrowed.
  static Range limits() {
    if constexpr (std::is_same<M, bool>::value || std::is_same<M, int64_t>::value || std::is_same<M, double>::value) {
      return {};
    } else if constexpr (std::is_integral<M>::value && std::is_unsigned<M>::value && sizeof(M) >= sizeof(int64_t)) {
      return {Bound{0, true}, std::nullopt};
    } else {
      return {Bound{static_cast<double>(std::numeric_limits<M>::lowest()), true},
              Bound{static_cast<double>(std::numeric_limits<M>::max()), true}};
    }
  }
  static std::string yaml(M v) {
    if constexpr (std::is_same<M, bool>::value) return yaml_of(v);
    else if constexpr (std::is_integral<M>::value) return yaml_of(static_cast<int64_t>(v));
    else return yaml_of(static_cast<double>(v));
  }
  static M read(const Options& o, const std::string& key) {
    if constexpr (std::is_same<M, bool>::value) {
      return o.get_bool(key);
    } else if constexpr (std::is_integral<M>::value) {
      const int64_t v = o.get_int(key);
      if (static_cast<int64_t>(static_cast<M>(v)) != v) o.fail(key, "is too large: " + std::to_string(v));
      return static_cast<M>(v);
    } else {
      const double v = o.get_float(key);
      // a magnitude the member cannot hold but as 0 (a float's 1e-50) is refused, not flushed to 0
      if (v != 0 && (v > 0 ? v : -v) < static_cast<double>(std::numeric_limits<M>::min()))
        o.fail(key, "is too close to 0 for its " + std::to_string(sizeof(M) * 8) + "-bit float: give 0 or a magnitude of at least " +
                        yaml_of(static_cast<double>(std::numeric_limits<M>::min())) + ", got " + yaml_of(v));
      return static_cast<M>(v);
    }
  }
};
template <>
struct FieldType<std::string> {
  static constexpr Type type = Type::String;
  static Range limits() { return {}; }
  static std::string yaml(const std::string& v) { return yaml_of(v); }
  static std::string read(const Options& o, const std::string& key) { return o.get_string(key); }
};
template <>
struct FieldType<std::vector<std::string>> {
  static constexpr Type type = Type::List;
  static Range limits() { return {}; }
  static std::string yaml(const std::vector<std::string>& v) { return yaml_of(v); }
  static std::vector<std::string> read(const Options& o, const std::string& key) { return o.get_list(key); }
};
template <class M>
struct FieldType<std::optional<M>> {
  static constexpr Type type = FieldType<M>::type;
  static Range limits() { return FieldType<M>::limits(); }
  static std::string yaml(const std::optional<M>& v) { return v ? FieldType<M>::yaml(*v) : "~"; }
  static std::optional<M> read(const Options& o, const std::string& key) {
    if (!o.is_set(key)) return std::nullopt;
    return FieldType<M>::read(o, key);
  }
};

template <class T, class M, class Read>
std::shared_ptr<const FieldBinding> bind(M T::*member, std::string key, Read read) {
  return std::make_shared<FieldBinding>(
      FieldBinding{std::type_index(typeid(T)), [member, key = std::move(key), read](void* object, const Options& o) {
                     static_cast<T*>(object)->*member = read(o, key);
                   }});
}
}  // namespace detail

template <class T, class M>
Schema& Schema::field(std::string key, M T::*member, const typename detail::Same<M>::type& default_value,
                      std::string doc) {
  auto binding = detail::bind(member, key, &detail::FieldType<M>::read);
  add(std::move(key), detail::FieldType<M>::type, detail::FieldType<M>::yaml(default_value), std::move(doc));
  specs_.back().field = std::move(binding);
  specs_.back().range = detail::FieldType<M>::limits();  // range() below narrows it further
  return *this;
}

template <class T, class M>
Schema& Schema::bytes_field(std::string key, M T::*member, std::string default_yaml, std::string doc) {
  static_assert(std::is_same<M, int64_t>::value || std::is_same<M, std::optional<int64_t>>::value,
                "a bytes field is an int64_t or a std::optional<int64_t>");
  auto binding = detail::bind(member, key, [](const Options& o, const std::string& k) -> M {
    if constexpr (std::is_same<M, int64_t>::value) return o.get_bytes(k);
    else return o.is_set(k) ? M(o.get_bytes(k)) : M();
  });
  add(std::move(key), Type::Bytes, std::move(default_yaml), std::move(doc));
  specs_.back().field = std::move(binding);
  return *this;
}

}  // namespace tt
