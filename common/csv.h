#pragma once
/// \file csv.h
/// A small RFC 4180 CSV reader: quoted fields with commas, doubled quotes and newlines inside.

#include <map>
#include <string>
#include <vector>

namespace shardcast {

struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::size_t> lines;  ///< the file line each row starts on (the header is line 1)
  /// Column index by name, or -1.
  int Column(const std::string& name) const;
  /// Cell of row `r` in column `name` ("" when the column is absent or `r` is past the last row).
  std::string Get(std::size_t r, const std::string& name) const;
};

/// Parses CSV text (RFC 4180 quoting; a leading UTF-8 byte-order mark is skipped) from `file` (for
/// messages). InputError naming the file: an empty file; with the
/// line on an unterminated quote or a row with more or fewer fields than the header.
CsvTable ParseCsv(const std::string& text, const std::string& file);
CsvTable ReadCsvFile(const std::string& path);
/// A CSV field in double quotes, inner quotes doubled (RFC 4180), as ParseCsv reads it back.
std::string CsvQuote(const std::string& field);

}  // namespace shardcast
