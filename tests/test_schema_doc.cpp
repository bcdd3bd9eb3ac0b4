// docs/schema.md's field tables are the line's declaration (core/line_fields.hpp), rendered: each table
// after a marker `<!-- fields: <table> -->` holds the rows naming that table, a row per field (the
// fields after it marked kAsAbove named in the same row), with its type, unit, meaning and null cases;
// the compact line's table (`tiers`) lists the rows the compact line and the run record carry. When one
// differs, the test writes the document as the rows give it to build/tests/schema.md. Members (rows
// a parent's row describes) are held to that row's text.
#include <steptrace/core/line_fields.hpp>
#include <steptrace/core/schema_data.hpp>

#include <cctype>
#include <cstring>
#include <iterator>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "../docs/schema_prose.hpp"
#include "support.hpp"

using namespace steptrace;

namespace {

// A row's meaning as the renderer uses it: its prose (docs/schema_prose.hpp), kAsAbove for a row shown
// with the row above, nullptr for a member (its parent's row says).
constexpr const char kAsAbove[] = "(as above)";
const line_prose::FieldProse* prose(Record r, const LineField& f) {
  return f.shown == Shown::own ? line_prose::prose_of(r, f.path) : nullptr;
}
std::vector<const char*> meanings(Record r) {
  std::vector<const char*> out;
  for (const LineField& f : record_fields(r)) {
    const line_prose::FieldProse* p = prose(r, f);
    out.push_back(f.shown == Shown::with_above ? kAsAbove : p ? p->meaning : nullptr);
  }
  return out;
}

// A row's name as its table shows it: dotted, under the table's base (the per-phase GPU table's
// `phases.<name>.gpu.`), an array's element as `[]`.
std::string shown_name(const LineField& f, const std::string& table) {
  std::string p = f.path;
  if (table == "phase_gpu") p = p.substr(std::string("/phases/*/gpu/").size() - 1);
  std::string out;
  for (std::size_t i = 1; i < p.size(); ++i) {
    if (p.compare(i, 2, "/*") == 0) {  // an array's element (`threads[].open_phases`)
      out += "[]";
      ++i;
      continue;
    }
    out += p[i] == '/' ? '.' : p[i];
  }
  return out;
}
std::string cell(const char* text) {
  std::string out;
  for (const char* c = text; *c; ++c) out += *c == '|' ? std::string("\\|") : std::string(1, *c);
  return out;
}

// Whether `text` names `name` as a field: in backticks (`name`) or as an entry of a `{a, name, ...}` list.
bool names_word(const std::string& text, const std::string& name) {
  const auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (auto at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    const std::size_t end = at + name.size();
    if ((at > 0 && ident(text[at - 1])) || (end < text.size() && ident(text[end]))) continue;
    const char before = at > 0 ? text[at - 1] : ' ';
    const bool listed = before == '{' || (before == ' ' && at >= 2 && text[at - 2] == ',');
    if (before == '`' || (listed && end < text.size() && std::string(",}[]:").find(text[end]) != std::string::npos))
      return true;
  }
  return false;
}

// Whether the member row `all[i]` is documented: named in the unit or meaning of the shown row of its
// nearest ancestor (a kAsAbove row counts as its group's head), unless it is a container's element or
// entry (`*`) or an object some of whose members are shown rows of their own.
bool member_documented(const std::vector<LineField>& all, const std::vector<const char*>& meaning, std::size_t i) {
  const std::string path = all[i].path;
  const std::string name = path.substr(path.rfind('/') + 1);
  if (name == "*") return true;
  for (std::size_t j = 0; j < all.size(); ++j)
    if (meaning[j] && std::string(all[j].path).rfind(path + "/", 0) == 0) return true;
  for (std::string anc = path.substr(0, path.rfind('/')); !anc.empty(); anc = anc.substr(0, anc.rfind('/')))
    for (std::size_t j = 0; j < all.size(); ++j) {
      if (anc != all[j].path || !meaning[j]) continue;
      std::size_t head = j;
      while (head > 0 && meaning[head] == kAsAbove) --head;
      return names_word(std::string(all[head].unit) + " " + meaning[head], name);
    }
  return false;
}

const char* type_name(FieldType t) {
  static const char* const names[] = {"string", "number", "integer", "boolean", "object", "object of names", "array"};
  return names[static_cast<int>(t)];
}

// The rows of a table as docs/schema.md shows them: a row per field with a meaning, the fields after it
// marked kAsAbove named in the same row (their types and units joined unless all alike). `null_column`:
// the table has a "null when" column (else its rows may say nothing there).
std::string render_table(const std::string& id, bool null_column) {
  std::string out;
  for (const Record record : kRecords) {
    const auto& all = record_fields(record);
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (!all[i].table || id != all[i].table) continue;
      const line_prose::FieldProse* text = prose(record, all[i]);
      INFO(all[i].path << ": a row of its own with no prose in docs/schema_prose.hpp");
      REQUIRE(text);
      std::vector<const LineField*> group{&all[i]};
      for (std::size_t j = i + 1; j < all.size() && all[j].shown == Shown::with_above; ++j) group.push_back(&all[j]);
      std::string names, types, units;
      bool same_type = true, same_unit = true;
      for (const LineField* f : group) {
        names += (names.empty() ? "`" : ", `") + shown_name(*f, id) + "`";
        types += (types.empty() ? "" : ", ") + std::string(type_name(f->type));
        units += (units.empty() ? "" : ", ") + std::string(f->unit);
        same_type = same_type && f->type == group.front()->type;
        same_unit = same_unit && std::string(f->unit) == group.front()->unit;
      }
      out += "| " + names + " | " + (same_type ? type_name(group.front()->type) : types) + " | " +
             (same_unit ? cell(group.front()->unit) : cell(units.c_str())) + " | " + cell(text->meaning) + " |";
      INFO(all[i].path << " says when it is null; table " << id << " has no column for it");
      CHECK((null_column || !text->null_when));
      if (null_column) out += " " + cell(text->null_when ? text->null_when : "") + " |";
      out += "\n";
    }
  }
  return out;
}

// The compact line's and the run record's table: their rows in order, the compact line's first.
std::string render_tiers() {
  std::string out;
  for (const auto& [bit, name] : {std::pair<line_field::FieldTier, const char*>{line_field::kCompact, "compact"},
                                  {line_field::kRun, "run"}})
    for (const LineField& f : line_fields())
      if (f.tiers & bit)
        out += std::string("| `") + f.path + "` | " + name + " | " + type_name(f.type) + " | " + cell(f.unit) + " | " +
               (f.type == FieldType::number || f.type == FieldType::integer
                    ? (f.digits == Digits::integer ? "whole" : "6 significant digits")
                    : "as is") +
               " |\n";
  return out;
}

// docs/schema.md with every marked table's rows rendered anew: a marker line `<!-- fields: id -->`,
// then the table's header and separator (kept), then its rows (replaced) up to the first line that is
// not a table row. `tables`: the ids met (each once).
std::string render_schema_tables(const std::string& doc, std::set<std::string>& tables) {
  const std::string marker = "<!-- fields: ";
  std::string out;
  std::size_t at = 0;
  for (;;) {
    auto m = doc.find("\n" + marker, at == 0 ? 0 : at - 1);  // a marker is a line of its own
    if (m == std::string::npos) break;
    ++m;
    const auto id_end = doc.find(" -->\n", m);
    REQUIRE(id_end != std::string::npos);
    const std::string id = doc.substr(m + marker.size(), id_end - m - marker.size());
    INFO("marker " << id);
    REQUIRE(id.find_first_of(" \n`") == std::string::npos);
    CHECK(tables.insert(id).second);  // one table per id
    const auto header = id_end + 5;
    const auto header_end = doc.find('\n', header);
    REQUIRE(header_end != std::string::npos);
    const auto separator_end = doc.find('\n', header_end + 1);
    REQUIRE(separator_end != std::string::npos);
    const std::string head = doc.substr(header, header_end - header);
    REQUIRE(head.rfind("| field |", 0) == 0);
    REQUIRE(doc.compare(header_end + 1, 4, "|---") == 0);
    auto rows_end = separator_end + 1;
    while (rows_end < doc.size() && doc[rows_end] == '|') {
      const auto nl = doc.find('\n', rows_end);
      rows_end = nl == std::string::npos ? doc.size() : nl + 1;
    }
    out += doc.substr(at, separator_end + 1 - at);
    const std::string rows = id == "tiers" ? render_tiers() : render_table(id, head.find("| null when |") != std::string::npos);
    CHECK_FALSE(rows.empty());  // a marker no row names
    out += rows;
    at = rows_end;
  }
  return out + doc.substr(at);
}

}  // namespace

// The declaration shipped as data (core/schema_data.hpp) is the rows as they are: when it differs, the
// test writes the file the rows give to build/tests/schema.json.
TEST_CASE("python/steptrace/schema.json is core/line_fields.hpp's rows", "[schema]") {
  const std::string shipped = steptrace_test::source_text("python/steptrace/schema.json");
  const std::string rendered = schema_data_json();
  if (rendered != shipped) {
    std::ofstream("schema.json") << rendered;
    FAIL("python/steptrace/schema.json differs from core/line_fields.hpp's rows; the file the rows give is in "
         "build/tests/schema.json");
  }
  // What the readers rely on: each record's rows, a pointer each, the step line's tiers named.
  CHECK(rendered.find("\"path\": \"/step_time_ms\", \"type\": \"number\", \"tiers\": [\"full\", \"compact\"") !=
        std::string::npos);
  CHECK(rendered.find("\"path\": \"/last_global_step\"") != std::string::npos);  // the end record's
  CHECK(rendered.find("\"path\": \"/threads/*/open_phases/*/open_s\"") != std::string::npos);  // the stall record's
  CHECK(rendered.find("\"path\": \"/stalled_step\"") != std::string::npos);  // the resumed record's
  CHECK(rendered.find("\"format\": \"steptrace.schema/1\"") == 1);
}

TEST_CASE("docs/schema.md's field tables are core/line_fields.hpp's rows", "[schema]") {
  const std::string doc = steptrace_test::source_text("docs/schema.md");
  std::set<std::string> tables;
  const std::string rendered = render_schema_tables(doc, tables);
  if (rendered != doc) {
    std::ofstream("schema.md") << rendered;
    FAIL("docs/schema.md's field tables differ from core/line_fields.hpp; the document with the tables "
         "the rows give is in build/tests/schema.md");
  }
  for (const Record record : kRecords)
    for (const LineField& f : record_fields(record))
      if (f.table) {
        INFO("row " << f.path << " names table " << f.table << ", which docs/schema.md has no marker for");
        CHECK(tables.count(f.table));
      }
  CHECK(tables.count("tiers"));
  CHECK(tables.size() >= 15);
  CHECK(tables.count("end"));
  CHECK(tables.count("stall"));
  CHECK(tables.count("resumed"));
  std::size_t shown = 0;
  for (const LineField& f : line_fields()) shown += f.table != nullptr;
  CHECK(shown > 100);
  for (const Record record : kRecords) {
    const auto& all = record_fields(record);
    const std::vector<const char*> meaning = meanings(record);
    std::size_t own = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      const LineField& f = all[i];
      INFO(f.path);
      // A row of its own has its prose, and "never" there is the row's Nulls::never.
      if (f.shown == Shown::own) {
        ++own;
        const line_prose::FieldProse* p = prose(record, f);
        REQUIRE(p);
        CHECK(f.table);
        CHECK((p->null_when && std::strncmp(p->null_when, "never", 5) == 0) == (f.nulls == Nulls::never));
      }
      // A row shown with the row above follows it (or another such row): else no table shows it.
      if (f.shown == Shown::with_above)
        CHECK((i > 0 && (all[i - 1].table || all[i - 1].shown == Shown::with_above)));
      // A member is named in the row that shows its nearest ancestor (`device`'s `{index, name, ...}`),
      // unless it is an element or entry of a container (`*`) or an object whose members have rows.
      if (f.shown == Shown::member) CHECK(member_documented(all, meaning, i));
      // What the compact line or the run record carries is a value, never an object.
      if (f.tiers) CHECK((f.type != FieldType::object && f.type != FieldType::names && f.type != FieldType::array));
    }
    // No prose without its row: as many as the rows of their own.
    std::size_t prose_rows = 0;
    (void)line_prose::prose_begin(record, &prose_rows);
    CHECK(own == prose_rows);
  }
  // The member rule can fail: `b` is named in no row.
  const std::vector<LineField> rows = {line_field::row("t", "/x", FieldType::object, "object `{a}`", Nulls::possible),
                                       line_field::member("/x/a", FieldType::number, "ms"),
                                       line_field::member("/x/ab", FieldType::number, "ms")};
  CHECK(member_documented(rows, {"m", nullptr, nullptr}, 1));
  CHECK_FALSE(member_documented(rows, {"m", nullptr, nullptr}, 2));
}
