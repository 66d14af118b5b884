// tt::printable_text: what a terminal or a log is given of a language model's sample.
#include <gtest/gtest.h>

#include <string>

#include "tt/text_file.h"

namespace {
const std::string kR = "\xEF\xBF\xBD";  // U+FFFD
}  // namespace

TEST(TextFile, PrintableTextKeepsUtf8AndReplacesBadBytesAndControlCharacters) {
  // Text, newlines, tabs and any character of two to four bytes pass as they are.
  const std::string text = "The caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\n\tdone \xF0\x9F\x98\x80";
  EXPECT_EQ(tt::printable_text(text), text);
  // An escape sequence, a carriage return, a bell, DEL and a C1 control (U+009B, the one-byte CSI).
  EXPECT_EQ(tt::printable_text("a\x1B[2Jb\rc\x07" "d\x7F" "e\xC2\x9B" "f"), "a" + kR + "[2Jb" + kR + "c" + kR + "d" + kR + "e" + kR + "f");
  // A stray continuation byte, an overlong form, a surrogate, a lead byte cut by the end.
  EXPECT_EQ(tt::printable_text("x\x80y\xC0\xAFz\xED\xA0\x80w\xE6\x97"), "x" + kR + "y" + kR + kR + "z" + kR + kR + kR + "w" + kR);
  // A lead byte the end cuts short takes only its own continuation bytes with it.
  EXPECT_EQ(tt::printable_text("\xF0" "ab"), kR + "ab");
  EXPECT_EQ(tt::printable_text("\xF0\x9F" "a"), kR + "a");
  // U+00A0 (no-break space) is no control: kept.
  EXPECT_EQ(tt::printable_text("\xC2\xA0"), "\xC2\xA0");
  EXPECT_EQ(tt::printable_text(""), "");
}
