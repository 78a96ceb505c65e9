#include "common/text.h"

#include <tuple>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

namespace shardcast {

std::string ToLower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> ClosestMatches(const std::string& query,
                                        const std::vector<std::string>& names,
                                        std::size_t max_results) {
  const std::string q = ToLower(query);
  const std::size_t limit = std::max<std::size_t>(2, q.size() / 3);
  // (score, tie-break, name): among names containing the query (score 0), the nearer whole name
  // first ("num_layer" -> "num_layers" before "mtp_num_layers"); otherwise by name.
  std::vector<std::tuple<std::size_t, std::size_t, std::string>> scored;
  for (const auto& n : names) {
    const std::string ln = ToLower(n);
    // Distance to the whole name, or to its prefix of the query's length (+1), so that
    // "a100-sxm9" finds "a100-sxm4-80gb"; names containing the query score 0.
    const std::size_t whole = EditDistance(q, ln);
    std::size_t d = std::min(whole, EditDistance(q, ln.substr(0, q.size())) + 1);
    if (!q.empty() && ln.find(q) != std::string::npos) d = 0;
    if (d <= limit) scored.emplace_back(d, d == 0 ? whole : 0, n);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (const auto& [d, whole, n] : scored) {
    (void)whole;
    // Keep the nearest names, and any within distance 1.
    if (out.size() >= max_results || (d > std::get<0>(scored.front()) && d > 1)) break;
    out.push_back(n);
  }
  return out;
}

std::string FormatNumber(double v) {
  std::ostringstream ss;
  ss << v;
  return ss.str();
}

std::string FormatRate(double v) {
  // {:.4g} turns 9999.5 and above into 1e+04.
  return std::fabs(v) >= 9999.5 ? fmt::format("{:.0f}", v) : fmt::format("{:.4g}", v);
}

std::string FormatGiB(double bytes) { return fmt::format("{:.2f} GiB", bytes / 1073741824.0); }

std::string FormatCount(double count, int decimals) {
  const char* suffix[] = {"", " K", " M", " B", " T"};
  int i = 0;
  double v = count;
  while (std::fabs(v) >= 1000.0 && i < 4) {
    v /= 1000.0;
    ++i;
  }
  if (i == 0) return fmt::format("{:.0f}", v);
  return fmt::format("{:.{}f}{}", v, decimals, suffix[i]);
}

std::string FormatFlops(double flops) {
  const char* prefix[] = {"", "K", "M", "G", "T", "P", "E", "Z"};
  int i = 0;
  double v = flops;
  while (std::fabs(v) >= 1000.0 && i < 7) {
    v /= 1000.0;
    ++i;
  }
  return fmt::format("{:.4g} {}FLOP", v, prefix[i]);
}

std::string FormatSeconds(double seconds) {
  double a = std::fabs(seconds);
  if (a >= 1.0 || a == 0.0) return fmt::format("{:.3f} s", seconds);
  if (a >= 1e-3) return fmt::format("{:.3f} ms", seconds * 1e3);
  return fmt::format("{:.2f} us", seconds * 1e6);
}

std::string AlignColumns(const std::vector<std::vector<std::string>>& rows,
                         const std::vector<std::size_t>& min_widths, std::size_t indent) {
  std::vector<std::size_t> width(min_widths);
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (std::size_t i = 0; i + 1 < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    out += std::string(indent, ' ');
    for (std::size_t i = 0; i < row.size(); ++i) {
      const bool last = i + 1 == row.size();
      if (i > 0) out += last ? "  " : " ";
      if (!last) out += std::string(width[i] - std::min(width[i], row[i].size()), ' ');
      out += row[i];
    }
    out += '\n';
  }
  return out;
}

}  // namespace shardcast
