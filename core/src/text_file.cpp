#include "tt/text_file.h"

#include <cstdint>
#include <cstring>

#include "tt/error.h"

namespace tt {

namespace {
// Length of the valid UTF-8 sequence at s[i], or 0 when it is not one (overlong forms and
// surrogates included, as the Unicode standard's table 3-7 defines them).
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return s.size() - i;  // cut by the chunk's end: not counted against it
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}
}  // namespace

std::string not_text_reason(std::string_view bytes, int64_t offset) {
  if (const void* nul = std::memchr(bytes.data(), 0, bytes.size()))
    return detail::cat("a NUL byte at offset ", offset + (static_cast<const char*>(nul) - bytes.data()));
  size_t invalid = 0, i = 0;
  // a chunk of a file may begin inside a character: up to 3 continuation bytes are its tail
  while (i < 3 && i < bytes.size() && (static_cast<uint8_t>(bytes[i]) & 0xC0) == 0x80) ++i;
  for (; i < bytes.size();) {
    const size_t n = utf8_sequence(bytes, i);
    if (n == 0) {
      ++invalid;
      ++i;
    } else {
      i += n;
    }
  }
  if (invalid * 50 > bytes.size())
    return detail::cat(invalid * 100 / bytes.size(), "% of its ", bytes.size(), " bytes",
                       offset > 0 ? detail::cat(" from offset ", offset) : std::string(), " are not valid UTF-8");
  return "";
}

size_t first_invalid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const uint8_t c = static_cast<uint8_t>(text[i]);
    const size_t whole = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;  // the length its lead byte says
    const size_t n = utf8_sequence(text, i);  // shorter where the text ends inside it
    if (n != whole) return i;
    i += n;
  }
  return std::string::npos;
}

std::string printable_text(std::string_view text) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const uint8_t c = static_cast<uint8_t>(text[i]);
    const size_t n = utf8_sequence(text, i);
    const size_t whole = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    const bool control = (c < 0x20 && c != '\n' && c != '\t') || c == 0x7F ||
                         (c == 0xC2 && n == 2 && static_cast<uint8_t>(text[i + 1]) < 0xA0);  // U+0080-U+009F
    if (n == 0 || control) {
      out += kReplacement;
      i += n == 0 ? 1 : n;
    } else if (n != whole) {  // cut short by the end: the lead byte and the continuation bytes after it
      out += kReplacement;
      size_t k = 1;
      while (k < n && (static_cast<uint8_t>(text[i + k]) & 0xC0) == 0x80) ++k;
      i += k;
    } else {
      out.append(text, i, n);
      i += n;
    }
  }
  return out;
}

std::string line_column(std::string_view text, size_t offset) {
  size_t line = 1, start = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i)
    if (text[i] == '\n') {
      ++line;
      start = i + 1;
    }
  return detail::cat(line, ":", offset - start + 1);
}

}  // namespace tt
