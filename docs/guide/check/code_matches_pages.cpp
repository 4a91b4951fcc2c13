// The guide's code check (ctest: guide.code_matches_pages).
//
//   spindle_guide_code_matches_pages <docs/guide directory>
//
// Every ```cpp block of every page (docs/guide/*.md) must be preceded, on the line right before
// it, by a marker naming the program it shows:
//
//   <!-- code: code/<name>.cpp -->
//   ```cpp
//   ...the whole of docs/guide/code/<name>.cpp...
//   ```
//
// and must be that file byte for byte (a trailing newline aside). The programs themselves are
// compiled and run by the test suite (docs/guide/CMakeLists.txt), so what a page shows is what
// was tested. Also refused: a marker not followed by a ```cpp block, a marker naming a file that
// does not exist, an indented ```cpp fence (it would escape the check), an unclosed block, and a
// program in code/ that no page shows. Exit status 0 when everything matches, 1 otherwise, with
// one line per problem: "<page>:<line>: <what>".
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string::size_type start = 0;
  while (start < text.size()) {
    const std::string::size_type end = text.find('\n', start);
    if (end == std::string::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::string without_trailing_newlines(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::string_view trim_left(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  return text;
}

std::string_view trim_right(std::string_view text) {
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) {
    text.remove_suffix(1);
  }
  return text;
}

bool is_cpp_language(std::string_view language) {
  return language == "cpp" || language == "c++" || language == "cxx" || language == "cc";
}

// The file named by a marker line, or nullopt when the line is not a marker.
std::optional<std::string> marker_target(std::string_view line) {
  constexpr std::string_view prefix = "<!-- code: ";
  constexpr std::string_view suffix = " -->";
  line = trim_right(line);
  if (!line.starts_with(prefix) || !line.ends_with(suffix)) return std::nullopt;
  line.remove_prefix(prefix.size());
  line.remove_suffix(suffix.size());
  return std::string(line);
}

struct checker {
  fs::path guide;
  int problems = 0;
  int blocks = 0;
  std::set<std::string> shown;  // "code/<name>.cpp" of every block checked

  void problem(const std::string& page, std::size_t line, const std::string& what) {
    std::fprintf(stderr, "%s:%zu: %s\n", page.c_str(), line, what.c_str());
    ++problems;
  }

  void check_page(const fs::path& path) {
    const std::string page = path.filename().string();
    const std::optional<std::string> text = read_file(path);
    if (!text) {
      problem(page, 0, "cannot read the page");
      return;
    }
    const std::vector<std::string> lines = split_lines(*text);
    std::optional<std::string> pending_marker;  // the previous line's marker
    std::size_t marker_line = 0;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const std::string_view line = lines[i];
      const std::string_view stripped = trim_left(line);
      if (!stripped.starts_with("```")) {
        if (pending_marker) problem(page, marker_line, "marker not followed by a ```cpp block");
        pending_marker = marker_target(line);
        marker_line = i + 1;
        continue;
      }
      // An opening fence: find its end first (any block, so a fence inside is not misread).
      const std::string_view language = trim_right(stripped.substr(3));
      std::size_t end = i + 1;
      while (end < lines.size() && trim_right(trim_left(lines[end])) != "```") ++end;
      if (end == lines.size()) {
        problem(page, i + 1, "code block never closed");
        return;
      }
      if (is_cpp_language(language)) {
        check_block(page, lines, i, end, pending_marker, stripped.size() != line.size());
      } else if (pending_marker) {
        problem(page, marker_line, "marker followed by a ```" + std::string(language) +
                                       " block, not a ```cpp one");
      }
      pending_marker.reset();
      i = end;
    }
    if (pending_marker) problem(page, marker_line, "marker not followed by a ```cpp block");
  }

  void check_block(const std::string& page, const std::vector<std::string>& lines,
                   std::size_t open, std::size_t close, const std::optional<std::string>& marker,
                   bool indented) {
    ++blocks;
    if (indented) {
      problem(page, open + 1, "```cpp fence not at the start of its line");
      return;
    }
    if (!marker) {
      problem(page, open + 1,
              "```cpp block without a '<!-- code: code/<name>.cpp -->' line right before it");
      return;
    }
    if (!marker->starts_with("code/") || !marker->ends_with(".cpp") ||
        marker->find('/', 5) != std::string::npos) {
      problem(page, open, "marker must name code/<name>.cpp, not '" + *marker + "'");
      return;
    }
    shown.insert(*marker);
    const std::optional<std::string> program = read_file(guide / *marker);
    if (!program) {
      problem(page, open, "no such program: " + *marker);
      return;
    }
    std::string block;
    for (std::size_t k = open + 1; k < close; ++k) {
      block += lines[k];
      block += '\n';
    }
    const std::string expected = without_trailing_newlines(*program);
    const std::string actual = without_trailing_newlines(block);
    if (expected == actual) return;
    // Name the first line that differs.
    const std::vector<std::string> want = split_lines(expected);
    const std::vector<std::string> have = split_lines(actual);
    std::size_t k = 0;
    while (k < want.size() && k < have.size() && want[k] == have[k]) ++k;
    std::ostringstream what;
    what << "block differs from " << *marker << " at its line " << (k + 1) << ": ";
    if (k < want.size() && k < have.size()) {
      what << "the page has '" << have[k] << "', the program '" << want[k] << "'";
    } else if (k < want.size()) {
      what << "the page's block ends early (the program has " << want.size() << " lines)";
    } else {
      what << "the page's block is longer (the program has " << want.size() << " lines)";
    }
    problem(page, open + 2 + k, what.str());
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <docs/guide directory>\n", argv[0]);
    return 2;
  }
  checker c{fs::path(argv[1])};
  std::vector<fs::path> pages;
  std::vector<std::string> programs;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(c.guide, error)) {
    if (entry.path().extension() == ".md") pages.push_back(entry.path());
  }
  for (const auto& entry : fs::directory_iterator(c.guide / "code", error)) {
    if (entry.path().extension() == ".cpp") {
      programs.push_back("code/" + entry.path().filename().string());
    }
  }
  if (pages.empty()) {
    std::fprintf(stderr, "%s: no pages (*.md) found\n", argv[1]);
    return 1;
  }
  std::sort(pages.begin(), pages.end());
  std::sort(programs.begin(), programs.end());
  for (const fs::path& page : pages) c.check_page(page);
  for (const std::string& program : programs) {
    if (!c.shown.contains(program)) {
      std::fprintf(stderr, "%s: no page shows this program\n", program.c_str());
      ++c.problems;
    }
  }
  if (c.problems != 0) {
    std::fprintf(stderr, "%d problem(s) in the guide's code blocks\n", c.problems);
    return 1;
  }
  std::printf("%d ```cpp blocks in %zu pages match their programs; all %zu programs are shown\n",
              c.blocks, pages.size(), programs.size());
  return 0;
}
