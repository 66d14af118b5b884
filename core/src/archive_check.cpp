// tt::archive_damage: the CRC-32 of every record of a checkpoint archive (a zip file) checked
// against the file's own central directory before LibTorch reads it. LibTorch 1.13's reader
// does not check them, and a damaged archive can crash its TorchScript type parser (found by
// tests/fuzz/checkpoint: SIGSEGV in ScriptTypeParser::parseClassConstant); damage is refused here
// with a reason instead. zlib (Debian's zlib1g, which LibTorch links too) computes the CRC-32.
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "tt/checkpoint.h"
#include "tt/pread_file.h"
#include "tt/error.h"

namespace tt {
namespace {


uint64_t le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

}  // namespace

namespace {
// Inflates the raw deflate stream of `csize` bytes at `at`, which must give exactly `usize`
// bytes; their CRC-32 into `sum`. "" when it does, else why not.
std::string inflate_crc(const detail::PreadFile& f, uint64_t at, uint64_t csize, uint64_t usize,
                        std::vector<unsigned char>& in, uLong& sum) {
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return "cannot be inflated (zlib: out of memory)";
  std::vector<unsigned char> out(64 * 1024);
  uint64_t read = 0, produced = 0;
  int rc = Z_OK;
  std::string why;
  while (rc != Z_STREAM_END) {
    if (z.avail_in == 0 && read < csize) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(in.size(), csize - read));
      if (!f.read(static_cast<int64_t>(at + read), in.data(), chunk)) {
        why = "cannot be read";
        break;
      }
      z.next_in = in.data();
      z.avail_in = static_cast<uInt>(chunk);
      read += chunk;
    }
    z.next_out = out.data();
    z.avail_out = static_cast<uInt>(out.size());
    rc = inflate(&z, Z_NO_FLUSH);
    const size_t got = out.size() - z.avail_out;
    produced += got;
    if (produced > usize) {
      why = "inflates to more than its " + std::to_string(usize) + " bytes";
      break;
    }
    sum = crc32(sum, out.data(), static_cast<uInt>(got));
    if (rc == Z_STREAM_END) break;
    if (rc != Z_OK && !(rc == Z_BUF_ERROR && got > 0)) {
      why = "does not inflate (damaged deflate data)";
      break;
    }
    if (z.avail_in == 0 && read == csize && got == 0) {
      why = "ends before its deflate stream does";
      break;
    }
  }
  inflateEnd(&z);
  if (why.empty() && produced != usize)
    why = "inflates to " + std::to_string(produced) + " bytes where the directory says " + std::to_string(usize);
  return why;
}
}  // namespace

std::string archive_damage(const std::filesystem::path& path) {
  detail::PreadFile f(path.string());
  if (!f.ok()) return "cannot open it: " + std::string(std::strerror(errno));
  const int64_t size = f.size();
  // The end of central directory record: 22 bytes and a comment of up to 64 KiB, at the end.
  const int64_t tail = std::min<int64_t>(size, 22 + 65535);
  if (size < 22) return "not a zip archive (" + std::to_string(size) + " bytes)";
  std::vector<unsigned char> end(static_cast<size_t>(tail));
  if (!f.read(size - tail, end.data(), end.size())) return "cannot read its end";
  int64_t eocd = -1;
  for (int64_t i = tail - 22; i >= 0; --i)
    if (le(&end[static_cast<size_t>(i)], 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd < 0) return "not a zip archive (no end of central directory record)";
  const unsigned char* e = &end[static_cast<size_t>(eocd)];
  uint64_t entries = le(e + 10, 2), dir_size = le(e + 12, 4), dir_offset = le(e + 16, 4);
  if (entries == 0xFFFF || dir_size == 0xFFFFFFFF || dir_offset == 0xFFFFFFFF) {  // zip64
    const int64_t loc = size - tail + eocd - 20;
    unsigned char l[20], z[56];
    if (loc < 0 || !f.read(loc, l, 20) || le(l, 4) != 0x07064b50) return "zip64 locator missing";
    const uint64_t at = le(l + 8, 8);
    if (at + 56 > static_cast<uint64_t>(size) || !f.read(static_cast<int64_t>(at), z, 56) || le(z, 4) != 0x06064b50)
      return "zip64 end of central directory record missing";
    entries = le(z + 32, 8), dir_size = le(z + 40, 8), dir_offset = le(z + 48, 8);
  }
  if (dir_offset + dir_size > static_cast<uint64_t>(size) || dir_size > (uint64_t{1} << 30))
    return "its central directory lies outside the file";
  std::vector<unsigned char> dir(static_cast<size_t>(dir_size));
  if (!f.read(static_cast<int64_t>(dir_offset), dir.data(), dir.size())) return "cannot read its central directory";
  std::vector<unsigned char> buf(static_cast<size_t>(std::min<int64_t>(size, 1 << 20)));  // no record is larger than the file
  std::set<std::string> names;  // a record's name names one record: LibTorch reads by name
  size_t p = 0;
  for (uint64_t k = 0; k < entries; ++k) {
    if (p + 46 > dir.size() || le(&dir[p], 4) != 0x02014b50) return "central directory entry " + std::to_string(k) + " is damaged";
    const unsigned char* c = &dir[p];
    const uint64_t method = le(c + 10, 2), crc = le(c + 16, 4);
    uint64_t csize = le(c + 20, 4), usize = le(c + 24, 4), local = le(c + 42, 4);
    const size_t n = le(c + 28, 2), x = le(c + 30, 2), m = le(c + 32, 2);
    if (p + 46 + n + x + m > dir.size()) return "central directory entry " + std::to_string(k) + " is damaged";
    const std::string name(reinterpret_cast<const char*>(c + 46), n);
    if (!names.insert(name).second) return "record '" + name + "' appears twice in its central directory";
    for (size_t q = p + 46 + n; q + 4 <= p + 46 + n + x;) {  // the zip64 extra field
      const uint64_t id = le(&dir[q], 2), len = le(&dir[q + 2], 2);
      size_t v = q + 4;
      if (id == 0x0001) {
        if (usize == 0xFFFFFFFF && v + 8 <= q + 4 + len) usize = le(&dir[v], 8), v += 8;
        if (csize == 0xFFFFFFFF && v + 8 <= q + 4 + len) csize = le(&dir[v], 8), v += 8;
        if (local == 0xFFFFFFFF && v + 8 <= q + 4 + len) local = le(&dir[v], 8);
      }
      q += 4 + len;
    }
    p += 46 + n + x + m;
    unsigned char h[30];
    if (local + 30 > static_cast<uint64_t>(size) || !f.read(static_cast<int64_t>(local), h, 30) || le(h, 4) != 0x04034b50)
      return "record '" + name + "': its local header is damaged";
    // The local header names the same record (a directory entry pointing at another record's
    // data reads the wrong bytes under this name).
    const uint64_t local_n = le(h + 26, 2);
    std::string local_name(local_n, '\0');
    if (local_n != n || !f.read(static_cast<int64_t>(local + 30), local_name.data(), local_n) || local_name != name)
      return "record '" + name + "': its local header names another record";
    const uint64_t data = local + 30 + local_n + le(h + 28, 2);
    if (data + csize > static_cast<uint64_t>(size)) return "record '" + name + "' runs past the end of the file";
    // The CRC-32 is of the record's uncompressed bytes. LibTorch stores tensors and compresses
    // (deflate) some TorchScript sources, and checks neither: its zip reader is built without
    // CRC checks, and its TorchScript parser crashed on a damaged compressed source.
    uLong sum = crc32(0L, Z_NULL, 0);
    if (method == 0) {
      if (csize != usize) return "record '" + name + "' is stored with two different sizes";
      for (uint64_t done = 0; done < csize;) {
        const size_t chunk = static_cast<size_t>(std::min<uint64_t>(buf.size(), csize - done));
        if (!f.read(static_cast<int64_t>(data + done), buf.data(), chunk)) return "cannot read record '" + name + "'";
        sum = crc32(sum, buf.data(), static_cast<uInt>(chunk));
        done += chunk;
      }
    } else if (method == 8) {
      const std::string why = inflate_crc(f, data, csize, usize, buf, sum);
      if (!why.empty()) return "record '" + name + "' " + why;
    } else {
      return "record '" + name + "' uses compression method " + std::to_string(method) +
             " (a checkpoint's records are stored or deflated)";
    }
    if (sum != crc) {
      char text[96];
      std::snprintf(text, sizeof text, "' fails its CRC-32 check (0x%08lx, the directory says 0x%08lx)",
                    static_cast<unsigned long>(sum), static_cast<unsigned long>(crc));
      return "record '" + name + text;
    }
  }
  return "";
}

}  // namespace tt
