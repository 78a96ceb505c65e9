#pragma once
/// \file text.h
/// Small text helpers: case folding, joining, edit distance for "did you mean", and the number
/// formats used in human output (SI for bytes and FLOPs, fixed for times).

#include <cstdint>
#include <string>
#include <vector>

namespace shardcast {

std::string ToLower(std::string s);
std::string Join(const std::vector<std::string>& parts, const std::string& sep);
std::vector<std::string> Split(const std::string& s, char sep);
/// Levenshtein distance between two strings (case-sensitive).
std::size_t EditDistance(const std::string& a, const std::string& b);
/// Up to `max_results` names closest to `query`: first those containing it, then those within
/// edit distance max(2, |query|/3), nearest first, ties by name.
std::vector<std::string> ClosestMatches(const std::string& query,
                                        const std::vector<std::string>& names,
                                        std::size_t max_results = 5);
/// Shortest round-trip text of a double ("312", "0.5", "1e+300").
std::string FormatNumber(double v);
/// Bytes as GiB with two decimals, e.g. "45.56 GiB" (binary units, as nvidia-smi reports).
std::string FormatGiB(double bytes);
/// Count with an SI suffix and `digits` significant decimals: 174.6e9 -> "174.6 B".
std::string FormatCount(double count, int decimals = 2);
/// FLOPs with an SI prefix: 1.0765e12 -> "1.077 TFLOP".
std::string FormatFlops(double flops);
/// A rate such as TFLOP/s with 4 significant digits, never in exponent notation: 989.4 -> "989.4",
/// 1978.9 -> "1979", 14000 -> "14000".
std::string FormatRate(double v);
/// Seconds scaled to s/ms/us as fits.
std::string FormatSeconds(double seconds);
/// Lines of a text table: every cell right-aligned to its column's width, which is the larger of
/// `min_widths[i]` (0 past its end) and the widest cell of column i, columns one space apart,
/// the last column left-aligned after two spaces (a note), each line `indent` spaces in and
/// ending in a newline. Rows may have fewer cells than others.
std::string AlignColumns(const std::vector<std::vector<std::string>>& rows,
                         const std::vector<std::size_t>& min_widths, std::size_t indent = 2);

}  // namespace shardcast
