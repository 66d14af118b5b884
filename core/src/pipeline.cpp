#include "tt/pipeline.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "train/plugin_host.h"
#include "tt/error.h"
#include "tt/examples.h"
#include "tt/registry.h"
#include "tt/text_file.h"
#include "tt/yaml_util.h"

namespace tt {

namespace {

// A component given by name ("model: topic", "plugins: [amp]") reached by a deeper key becomes
// {name: <scalar>}; a missing or null entry becomes an empty map.
YAML::Node as_map(const YAML::Node& n) {
  YAML::Node m(YAML::NodeType::Map);
  if (n.IsDefined() && n.IsScalar()) m["name"] = n.Scalar();
  return m;
}

size_t list_index(const YAML::Node& list, const std::string& segment, const std::string& where) {
  size_t idx = 0, used = 0;
  try {
    idx = std::stoul(segment, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TT_CHECK_AS(ConfigError, used == segment.size() && segment.find_first_not_of("0123456789") == std::string::npos,
              where, ": '", segment, "' indexes a list; use a number (0 is the first entry)");
  TT_CHECK_AS(ConfigError, idx < list.size(), where, ": index ", idx, " is past the end of the list (", list.size(),
              list.size() == 1 ? " entry)" : " entries)");
  return idx;
}

}  // namespace

void set_dotted(YAML::Node root, const std::string& key, const YAML::Node& value, const std::string& where) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  TT_CHECK_AS(ConfigError,
              !key.empty() && key.back() != '.' &&
                  std::none_of(parts.begin(), parts.end(), [](const std::string& p) { return p.empty(); }),
              where, ": '", key, "' has an empty key segment; a key is dotted, e.g. trainer.batch_size");
  // A comparison variant's `set` map is keyed by dotted paths ("model.size"): what follows
  // compare.variants.NAME.set. is one key of it, not a path into maps below it.
  if (parts.size() > 5 && parts[0] == "compare" && parts[1] == "variants" && parts[3] == "set") {
    for (size_t i = 5; i < parts.size(); ++i) parts[4] += "." + parts[i];
    parts.resize(5);
  }
  TT_CHECK_AS(ConfigError, root.IsMap(), where, ": a pipeline is a YAML map");
  // yaml-cpp nodes are handles: walk with reset() so that assignments write into the tree
  YAML::Node cur;
  cur.reset(root);
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    if (cur.IsSequence()) {
      const size_t idx = list_index(cur, parts[i], where);
      if (last) {
        cur[idx] = value;
        return;
      }
      if (!cur[idx].IsMap() && !cur[idx].IsSequence()) cur[idx] = as_map(cur[idx]);
      YAML::Node next;
      next.reset(cur[idx]);
      cur.reset(next);
    } else {
      if (last) {
        cur[parts[i]] = value;
        return;
      }
      const bool absent = !cur[parts[i]].IsDefined() || cur[parts[i]].IsNull();
      if (absent && parts[i + 1].find_first_not_of("0123456789") == std::string::npos) {
        std::string path = parts[0];
        for (size_t j = 1; j <= i; ++j) path += "." + parts[j];
        YAML::Emitter flow;
        flow << YAML::Flow << value;
        TT_FAIL_AS(ConfigError, where, ": the pipeline has no '", path, "' list for '", parts[i + 1],
                   "' to index; give the whole list", i + 2 == parts.size() ? ", e.g. " + path + "=[" + flow.c_str() + "]" : std::string());
      }
      if (!cur[parts[i]].IsMap() && !cur[parts[i]].IsSequence()) cur[parts[i]] = as_map(cur[parts[i]]);
      YAML::Node next;
      next.reset(cur[parts[i]]);
      cur.reset(next);
    }
  }
}

void apply_override(YAML::Node root, const std::string& text) {
  const auto eq = text.find('=');
  TT_CHECK_AS(ConfigError, eq != std::string::npos && eq > 0, "command line '", text,
              "': an override is key=value, e.g. trainer.batch_size=64");
  const std::string where = "command line '" + text + "'", value = text.substr(eq + 1);
  TT_CHECK_AS(ConfigError, !value.empty(), where, ": no value after '='; give one, or ~ for the default");
  TT_CHECK_AS(ConfigError, first_invalid_utf8(text) == std::string::npos, where,
              ": not UTF-8 text (a byte of another encoding, such as Latin-1); give it in UTF-8");
  YAML::Node v;
  try {
    v = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    TT_FAIL_AS(ConfigError, where, ": the value is not valid YAML: ", e.msg);
  }
  check_unique_keys(v, where);
  set_dotted(root, text.substr(0, eq), v, where);
}

void refuse_cap_beside_budget(const Pipeline& p, const std::string& budget) {
  p.trainer.check(!p.trainer.is_set("memory_cap"), "memory_cap",
                  "is set beside " + budget + ": the budget is planned and then becomes the cap; remove memory_cap");
}

namespace {

const std::vector<std::string> kTopKeys = {"name",     "seed",    "model",   "data",   "optimizer",
                                           "schedule", "plugins", "trainer", "output", "compare"};

std::string override_key(const std::string& o) { return o.substr(0, o.find('=')); }

// "command line '<override>'" for the last override that wrote the section at PATH ("plugins.1")
// or one above it ("plugins=[...]"), else "": the marks of nodes parsed from an override's
// value are positions in that value, not in the pipeline file.
std::string covering_origin(const std::vector<std::string>& overrides, const std::string& path) {
  std::string out;
  for (const auto& o : overrides) {
    const std::string key = override_key(o);
    if (path == key || path.rfind(key + ".", 0) == 0) out = "command line '" + o + "'";
  }
  return out;
}

std::string where_of(const std::string& file, const YAML::Node& node, const std::vector<std::string>& overrides,
                     const std::string& path) {
  const std::string origin = covering_origin(overrides, path);
  return origin.empty() ? location(file, node) : origin;
}

// key -> origin for the keys of SECTION (at `prefix`: "trainer.", "plugins.1.") that came from
// the command line: set one by one (trainer.batch_size=64) or with the whole section, or a
// section above it (trainer={batch_size: 64}, plugins=[...]). Later overrides win.
std::map<std::string, std::string> origins_under(const std::vector<std::string>& overrides, const std::string& prefix,
                                                 const YAML::Node& section) {
  std::map<std::string, std::string> out;
  for (const auto& o : overrides) {
    const std::string key = override_key(o), origin = "command line '" + o + "'";
    if (key.rfind(prefix, 0) == 0) {
      const std::string rest = key.substr(prefix.size());
      out[rest.substr(0, rest.find('.'))] = origin;
    } else if (!prefix.empty() && prefix.rfind(key + ".", 0) == 0) {
      if (section.IsDefined() && section.IsMap())
        for (const auto& kv : section) out[kv.first.Scalar()] = origin;
      else
        out[""] = origin;  // the section itself, as no map (trainer=5)
    }
  }
  return out;
}

// A component section: "name" or {name: x, ...options}.
ComponentSpec parse_component(const YAML::Node& node, const std::string& section, const std::string& file,
                              const Schema& (*schema_of)(const std::string&), const std::string& default_name,
                              const std::vector<std::string>& overrides, const std::string& prefix) {
  ComponentSpec c;
  const std::string path = prefix.substr(0, prefix.size() - 1);  // "plugins.1"
  c.where = where_of(file, node, overrides, path);
  YAML::Node opts;
  if (!node.IsDefined() || node.IsNull()) {
    TT_CHECK_AS(ConfigError, !default_name.empty(), file, ": the pipeline has no '", section,
                "' section; add e.g.\n  ", section, ":\n    name: ...\n(tt-run --list shows the choices)");
    c.name = default_name;
  } else if (node.IsScalar()) {
    c.name = node.Scalar();
  } else if (node.IsMap()) {
    // A map without a name changes the default component's options (optimizer.lr=0.01 on a
    // pipeline that names no optimizer); sections without a default need one.
    const bool named = node["name"].IsDefined();
    // {name:amp} is one key "name:amp" to YAML, which needs a space after the colon
    std::string glued;
    for (const auto& kv : node)
      if (kv.first.IsScalar() && kv.first.Scalar().rfind("name:", 0) == 0) glued = kv.first.Scalar();
    // {checkpoint: {policy: every}}, as DeepSpeed's and torchtune's configs nest a component's
    // options: said where the key names one
    std::string nested;
    if (!named && default_name.empty() && node.size() == 1 && node.begin()->first.IsScalar() &&
        (node.begin()->second.IsMap() || node.begin()->second.IsNull())) {
      try {
        schema_of(node.begin()->first.Scalar());
        nested = node.begin()->first.Scalar();
      } catch (const Error&) {  // not a component's name: the message says no more
      }
    }
    TT_CHECK_AS(ConfigError, (named && node["name"].IsScalar()) || (!named && !default_name.empty()), c.where, ": ",
                section, " needs a 'name' (tt-run --list shows the choices)",
                !glued.empty() ? "; it has the key '" + glued + "': YAML needs a space after the colon, 'name: " +
                                     glued.substr(5) + "'"
                : !nested.empty() ? "; it has the one key '" + nested + "': the options go beside the name, {name: " +
                                        nested + ", option: value, ...}"
                                  : std::string());
    c.name = named ? node["name"].Scalar() : default_name;
    opts = node;
  } else {
    TT_FAIL_AS(ConfigError, c.where, ": ", section, " must be a name or a map with 'name'");
  }
  // An unknown name is said where the name is (the file's line, or the override).
  const Schema* schema = nullptr;
  try {
    schema = &schema_of(c.name);
  } catch (const Error& e) {
    const std::string at = node.IsMap() && node["name"].IsDefined()
                               ? where_of(file, node["name"], overrides, path + ".name")
                               : (node.IsDefined() && !node.IsNull() ? c.where : file);
    const std::string msg = at + ": " + section + ": " + e.what();
    if (dynamic_cast<const ModuleError*>(&e)) throw ModuleError(msg);
    if (dynamic_cast<const ConfigError*>(&e)) throw ConfigError(msg);
    throw;
  }
  std::string ctx = section + " (" + c.name + ")";
  try {
    c.options = Options::parse(opts, *schema, ctx, file, {"name"}, origins_under(overrides, prefix, node));
  } catch (const UnknownKeyError& e) {
    // A name changed on the command line keeps the file's other keys, set for the one it named
    const auto renamed = std::find_if(overrides.begin(), overrides.end(),
                                      [&](const std::string& o) { return o.rfind(path + ".name=", 0) == 0; });
    if (renamed == overrides.end()) throw;
    throw ConfigError(detail::cat(e.what(), ". The command line's ", *renamed, " keeps ", file, "'s other ", path,
                                  " keys: give the whole section instead, e.g. '", path, "={name: ", c.name, "}'"));
  }
  return c;
}

const Schema& model_schema(const std::string& n) { return Registry::global().model(n).schema; }
const Schema& dataset_schema(const std::string& n) { return Registry::global().dataset(n).schema; }
const Schema& optimizer_schema(const std::string& n) { return Registry::global().optimizer(n).schema; }
const Schema& schedule_schema(const std::string& n) { return Registry::global().schedule(n).schema; }
const Schema& plugin_schema(const std::string& n) { return Registry::global().plugin(n).schema; }

// More entries than any pipeline needs: a generated list gone wrong.
constexpr size_t kMaxPlugins = 64;

Pipeline parse_tree(YAML::Node root, const std::string& file, const std::vector<std::string>& overrides) {
  if (!root.IsDefined() || root.IsNull())
    TT_FAIL_AS(ConfigError, file, ": the pipeline is empty. A pipeline needs at least 'model:' and 'data:'; "
               "start from ", examples_dir(), "/quickstart.yaml");
  TT_CHECK_AS(ConfigError, root.IsMap(), location(file, root),
              ": a pipeline is a YAML map (model:, data:, trainer:, ...), not ", root.IsSequence() ? "a list" : "a value");
  for (const auto& o : overrides) apply_override(root, o);
  auto top_origins = origins_under(overrides, "", root);
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (std::find(kTopKeys.begin(), kTopKeys.end(), key) == kTopKeys.end()) {
      std::string where = top_origins.count(key) ? top_origins[key] : location(file, it->first);
      std::string msg = detail::cat(where, ": unknown key '", key, "' at the top of the pipeline");
      std::string near = nearest(key, kTopKeys);
      if (!near.empty()) msg += "; did you mean '" + near + "'?";
      msg += " (valid keys: name, seed, model, data, optimizer, schedule, plugins, trainer, output, compare)";
      throw ConfigError(msg);
    }
  }
  Pipeline p;
  p.file = file;
  p.overrides = overrides;
  if (root["compare"].IsDefined() && !root["compare"].IsNull()) {
    TT_CHECK_AS(ConfigError, root["compare"].IsMap(), where_of(file, root["compare"], overrides, "compare"),
                ": compare must be a map (variants:, steps:, warmup_steps:, repeats:, baseline:)");
    p.has_compare = true;
  }
  p.name = root["name"].IsDefined() && root["name"].IsScalar()
               ? root["name"].Scalar()
               : std::filesystem::path(file).stem().string();
  if (p.name.empty() || p.name == "<string>") p.name = "run";
  // The name starts the run directory's name (<name>-<timestamp>, inside output.dir)
  TT_CHECK_AS(ConfigError, p.name.find('/') == std::string::npos && p.name != "." && p.name != "..",
              where_of(file, root["name"], overrides, "name"), ": name '", p.name,
              "' is not a file name (it begins the run directory's name inside output.dir): leave out '/'");
  if (root["seed"].IsDefined() && !root["seed"].IsNull()) {
    Schema s = Schema().add("seed", Type::Int, "0", "");
    YAML::Node wrap;
    wrap["seed"] = root["seed"];
    Options o = Options::parse(wrap, s, "", file, {}, top_origins);
    o.check(o.get_int("seed") >= 0, "seed", "must be >= 0");
    p.seed = static_cast<uint64_t>(o.get_int("seed"));
  }
  p.trainer = Options::parse(root["trainer"], trainer_schema(), "trainer", file, {},
                             origins_under(overrides, "trainer.", root["trainer"]));
  {
    const std::string dev = p.trainer.get_string("device");
    const bool indexed = dev.rfind("cuda:", 0) == 0 && dev.size() > 5 &&
                         dev.find_first_not_of("0123456789", 5) == std::string::npos && dev.size() <= 8;
    p.trainer.check(dev == "cpu" || dev == "cuda" || indexed, "device", "must be cpu, cuda or cuda:N, got '" + dev + "'");
  }
  if (p.trainer.is_set("micro_batch_size")) {
    const int64_t batch = p.trainer.get_int("batch_size");
    p.trainer.check(p.trainer.get_int("micro_batch_size") <= batch, "micro_batch_size",
                    "must be at most batch_size (" + std::to_string(batch) + ")");
  }
  if (p.trainer.is_set("memory_budget")) {
    refuse_cap_beside_budget(p, "trainer.memory_budget");
    try {
      parse_budget(p.trainer.get_string("memory_budget"));
    } catch (const ConfigError& e) {
      try {
        p.trainer.fail("memory_budget", std::string("= ") + e.what());  // "<file:line>: trainer.memory_budget = ..."
      } catch (const Error& located) {
        throw ConfigError(located.what());
      }
    }
  }
  p.output = Options::parse(root["output"], output_schema(), "output", file, {}, origins_under(overrides, "output.", root["output"]));
  // The model first: its module brings its datasets, so a pipeline loads only the modules it
  // names (a dataset found nowhere else still makes every installed module load).
  p.model = parse_component(root["model"], "model", file, &model_schema, "", overrides, "model.");
  p.data = parse_component(root["data"], "data", file, &dataset_schema, "", overrides, "data.");
  p.optimizer = parse_component(root["optimizer"], "optimizer", file, &optimizer_schema, "adamw", overrides,
                                "optimizer.");
  p.schedule = parse_component(root["schedule"], "schedule", file, &schedule_schema, "constant", overrides,
                               "schedule.");
  YAML::Node plugins = root["plugins"];
  if (plugins.IsDefined() && !plugins.IsNull()) {
    TT_CHECK_AS(ConfigError, plugins.IsSequence(), where_of(file, plugins, overrides, "plugins"),
                ": plugins must be a list, e.g. plugins: [checkpoint, {name: amp, dtype: bf16}]");
    TT_CHECK_AS(ConfigError, plugins.size() <= kMaxPlugins, where_of(file, plugins, overrides, "plugins"),
                ": plugins lists ", plugins.size(), " entries; a pipeline takes at most ", kMaxPlugins,
                " (every entry runs at every event of every step)");
    for (size_t i = 0; i < plugins.size(); ++i) {
      const std::string section = "plugins[" + std::to_string(i) + "]";
      p.plugins.push_back(parse_component(plugins[i], section, file, &plugin_schema, "", overrides,
                                          "plugins." + std::to_string(i) + "."));
      const ComponentSpec& entry = p.plugins.back();
      // a plugin that acts on a part of the model its model declares it has not
      const ModelComponent& model = Registry::global().model(p.model.name);
      const PluginComponent& plugin = Registry::global().plugin(entry.name);
      if (const std::string part = missing_part(model, plugin); !part.empty()) {
        std::string has;
        for (const auto& x : *model.parts) has += (has.empty() ? "" : ", ") + x;
        TT_FAIL_AS(ConfigError, entry.where, ": ", section, " (", entry.name, ") acts on a model's ", part,
                   ", and model '", p.model.name, "' has none (its parts: ", has.empty() ? "none" : has,
                   "); remove it from plugins, or use a model built from tt::nn's blocks (tt-run --list shows each model's "
                   "parts and what each plugin acts on)");
      }
      if (plugin.repeats == Repeats::Allowed) continue;
      for (size_t j = 0; j + 1 < p.plugins.size(); ++j)
        TT_CHECK_AS(ConfigError, p.plugins[j].name != entry.name, entry.where, ": ", section, " lists '", entry.name,
                    "' again (it is plugins[", j, "], at ", p.plugins[j].where,
                    "); list each plugin once, with all its options in one entry ('", entry.name,
                    "' does not declare that repeats are meaningful)");
    }
    // Built as the run builds them (tt/plugin.h: a constructor only reads and declares), so
    // what a factory or the plugins' declared order refuses is refused here: --dry-run too.
    PluginHost host;
    host.add_pipeline_plugins(p.plugins);
    try {
      host.check_declarations(p.trainer);
    } catch (const ConfigError& e) {
      throw ConfigError(where_of(file, plugins, overrides, "plugins") + ": " + e.what());
    }
  }
  return p;
}

}  // namespace

Pipeline parse_pipeline(const std::string& text, const std::string& file, const std::vector<std::string>& overrides) {
  // yaml-cpp takes any bytes; a string that is not UTF-8 would fail only where the run writes
  // its JSON files, after training
  if (text.rfind("\xFF\xFE", 0) == 0 || text.rfind("\xFE\xFF", 0) == 0)  // a UTF-16 editor's "Unicode"
    TT_FAIL_AS(ConfigError, file, " is UTF-16 text (its byte-order mark): save it as UTF-8, e.g. iconv -f UTF-16 -t "
               "UTF-8 ", file, " > NEW.yaml");
  if (const size_t nul = text.find('\0'); nul != std::string::npos)  // a data file given for the pipeline
    TT_FAIL_AS(ConfigError, file, " is not a pipeline file but binary data (a NUL byte at offset ", nul, "): tt-run takes a pipeline "
               "YAML file, whose data section names the data (e.g. data: {name: topic-npy, path: FILE}; tt-run --list "
               "shows the datasets)");
  if (const size_t bad = first_invalid_utf8(text); bad != std::string::npos)
    TT_FAIL_AS(ConfigError, file, ":", line_column(text, bad), ": not UTF-8 text (a byte of another encoding, such as "
               "Latin-1): save the file as UTF-8, e.g. iconv -f latin1 -t utf-8 ", file, " > NEW.yaml");
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    // A tab in a line's indentation is the usual cause, and yaml-cpp's message does not say so.
    std::string tab;
    std::istringstream lines(text);
    int number = 0;
    for (std::string line; tab.empty() && std::getline(lines, line);) {
      ++number;
      const size_t indent = line.find_first_not_of(" \t");
      if (line.find('\t') < std::min(indent, line.size()))
        tab = detail::cat(" (line ", number, " is indented with a tab: YAML indents with spaces)");
    }
    TT_FAIL_AS(ConfigError, file, ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg, tab);
  }
  check_unique_keys(root, file);
  return parse_tree(root, file, overrides);
}

Pipeline load_pipeline(const std::string& path, const std::vector<std::string>& overrides) {
  namespace fs = std::filesystem;
  std::error_code ec;
  TT_CHECK_AS(ConfigError, fs::exists(path, ec), path, ": pipeline file not found (from ", fs::current_path().string(),
              "). The examples are in ", examples_dir(), "/, e.g. ", examples_dir(), "/quickstart.yaml");
  TT_CHECK_AS(ConfigError, !fs::is_directory(path, ec), path, ": is a directory, not a pipeline file",
              " (to resume a run directory use --resume ", path, ")");
  std::ifstream in(path);
  TT_CHECK_AS(ConfigError, in.good(), path, ": cannot be read (permissions?)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_pipeline(ss.str(), path, overrides);
}

std::string Pipeline::resolved_yaml() const {
  YAML::Emitter out;
  auto emit_options = [&](const Options& o) {
    for (const auto& [k, v] : o.resolved()) out << YAML::Key << k << YAML::Value << YAML::Load(v);
  };
  auto emit_component = [&](const char* key, const ComponentSpec& c) {
    out << YAML::Key << key << YAML::Value << YAML::BeginMap << YAML::Key << "name" << YAML::Value << c.name;
    emit_options(c.options);
    out << YAML::EndMap;
  };
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << name;
  out << YAML::Key << "seed" << YAML::Value << seed;
  emit_component("model", model);
  emit_component("data", data);
  emit_component("optimizer", optimizer);
  emit_component("schedule", schedule);
  out << YAML::Key << "plugins" << YAML::Value << YAML::BeginSeq;
  for (const auto& pl : plugins) {
    out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << pl.name;
    emit_options(pl.options);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "trainer" << YAML::Value << YAML::BeginMap;
  emit_options(trainer);
  out << YAML::EndMap;
  out << YAML::Key << "output" << YAML::Value << YAML::BeginMap;
  emit_options(output);
  out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace tt
