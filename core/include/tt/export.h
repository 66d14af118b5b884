#pragma once
// Symbols that plugins and models (built with hidden visibility) share with the core.
#define TT_API __attribute__((visibility("default")))
