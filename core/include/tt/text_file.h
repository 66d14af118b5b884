#pragma once
// Telling text from binary data, for the datasets that read text files: a model trained on the
// bytes of an image or an archive learns nothing useful, and says nothing about it.
#include <string>
#include <string_view>

#include "tt/export.h"

namespace tt {

// Why `bytes` (a file's first chunk, or any chunk of it) is not UTF-8 text: "a NUL byte at
// offset 112", "31% of its 65536 bytes are not valid UTF-8"; empty when it is text. A few
// invalid bytes (a stray Latin-1 letter) pass: more than 2% of the bytes, or a NUL, do not.
// A chunk may begin or end inside a character (those bytes are not counted). `offset` is where
// the chunk starts in its file, for the message.
TT_API std::string not_text_reason(std::string_view bytes, int64_t offset = 0);

// Where `text` (a whole string: a pipeline file, a value) first stops being valid UTF-8: the
// byte offset, or std::string::npos when all of it is.
TT_API size_t first_invalid_utf8(std::string_view text);

// `text` for a terminal or a log: each byte that is not valid UTF-8 and each control character
// but newline and tab (C0, DEL, C1: a terminal's escape sequences among them) becomes U+FFFD.
// A language model's sample, early in training, is any bytes.
TT_API std::string printable_text(std::string_view text);

// "L:C" for a byte offset into `text`: its line and column (in bytes), both from 1.
TT_API std::string line_column(std::string_view text, size_t offset);

}  // namespace tt
