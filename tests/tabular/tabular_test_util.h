#pragma once
// What the tabular tests share.

// A tabular-icl model small enough for a test; the closing brace is left for more options.
inline constexpr const char kTinyModel[] =
    "{name: tabular-icl, d_cell: 4, d_id: 8, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64";
