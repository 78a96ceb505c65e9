#include "common/csv.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/json_reader.h"

namespace shardcast {

int CsvTable::Column(const std::string& name) const {
  for (std::size_t i = 0; i < header.size(); ++i) {
    if (header[i] == name) return static_cast<int>(i);
  }
  return -1;
}

std::string CsvTable::Get(std::size_t r, const std::string& name) const {
  const int c = Column(name);
  if (c < 0 || r >= rows.size() || static_cast<std::size_t>(c) >= rows[r].size()) return "";
  return rows[r][static_cast<std::size_t>(c)];
}

CsvTable ParseCsv(const std::string& raw, const std::string& file) {
  // A UTF-8 byte-order mark (spreadsheet programs write one) is not part of the first column's name.
  const std::string text = raw.rfind("\xEF\xBB\xBF", 0) == 0 ? raw.substr(3) : raw;
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw InputError(file + ": empty file, expected a CSV header line and rows under it");
  }
  CsvTable t;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, any = false;
  std::size_t line = 1, quote_line = 0, row_line = 1;
  auto end_field = [&] {
    row.push_back(field);
    field.clear();
  };
  auto end_row = [&] {
    end_field();
    if (t.header.empty()) {
      t.header = row;
    } else if (!(row.size() == 1 && row[0].empty())) {
      // A missing or extra comma shifts every later cell into the wrong column.
      if (row.size() != t.header.size()) {
        throw InputError(fmt::format("{}:{}: got {} fields, expected {} as in the header (a missing or extra comma?)",
                                     file, row_line, row.size(), t.header.size()));
      }
      t.rows.push_back(row);
      t.lines.push_back(row_line);
    }
    row.clear();
    any = false;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"') {
      quoted = true;
      quote_line = line;
      any = true;
    } else if (c == ',') {
      end_field();
      any = true;
    } else if (c == '\n') {
      end_row();
      ++line;
      row_line = line;
    } else if (c != '\r') {
      field += c;
      any = true;
    }
  }
  if (quoted) {
    throw InputError(file + ":" + std::to_string(quote_line) + ": unterminated quoted field (expected a closing \")");
  }
  if (any || !field.empty()) end_row();
  return t;
}

CsvTable ReadCsvFile(const std::string& path) { return ParseCsv(ReadTextFile(path), path); }

std::string CsvQuote(const std::string& field) {
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace shardcast
