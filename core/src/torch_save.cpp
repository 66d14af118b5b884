#include "tt/torch_save.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "tt/checkpoint.h"
#include "tt/error.h"

namespace tt {

c10::IValue read_torch_save(const std::filesystem::path& file, const std::string& fix) {
  const std::string f = file.string();
  std::ifstream in(file, std::ios::binary);
  TT_CHECK_AS(ConfigError, in.good(), "cannot open ", f, ": ", std::strerror(errno));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TT_CHECK_AS(ConfigError, !in.bad(), f, ": read failed");
  const auto starts = [&](const char* magic, size_t n) {
    return bytes.size() >= n && std::equal(magic, magic + n, bytes.begin());
  };
  if (!starts("PK\x03\x04", 4)) {
    TT_CHECK_AS(ConfigError, !starts("\x80", 1) && !starts("\x8a\x0a\x6c\xfc", 4), f,
                ": this is the legacy (non-zip) torch.save format, which LibTorch cannot read; in PyTorch 1.6 or later, ",
                fix);
    TT_FAIL_AS(ConfigError, f, ": not a .pt file (not a zip archive as torch.save writes); ", fix);
  }
  if (const std::string damage = archive_damage(file); !damage.empty())
    TT_FAIL_AS(ConfigError, f, ": the archive is damaged (", damage, "); ", fix);
  try {
    caffe2::serialize::PyTorchStreamReader reader(f);
    if (reader.hasRecord("data.pkl")) {
      const auto [data, size] = reader.getRecord("data.pkl");
      const std::string head(static_cast<const char*>(data.get()), std::min<size_t>(size, 32));
      // protocol 2, then GLOBAL 'collections OrderedDict': the object itself is one
      TT_CHECK_AS(ConfigError, head.size() < 27 || head.compare(2, 25, "ccollections\nOrderedDict\n") != 0, f,
                  ": holds a collections.OrderedDict (what state_dict() returns), which LibTorch cannot read; save a "
                  "plain dict: torch.save(dict(model.state_dict()), path)");
    }
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    TT_FAIL_AS(ConfigError, f, ": cannot read the archive (", first_line(what), "); ", fix);
  }
  try {
    return torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    // Python pickles a dict's items in batches of 1000 and a batch of one with SETITEM ('s'),
    // an opcode LibTorch's unpickler lacks.
    const bool setitem = what.find("Unknown opcode for unpickling at 0x73") != std::string::npos;
    TT_FAIL_AS(ConfigError, f, ": cannot unpickle it (", first_line(what),
               setitem ? ": LibTorch cannot read a Python dict of one entry, or of 1000 k + 1 entries" : "", "); ", fix);
  }
}

}  // namespace tt
