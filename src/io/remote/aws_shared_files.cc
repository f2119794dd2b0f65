#include "io/remote/aws_shared_files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

namespace stoker::io {
namespace {

std::string trim(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return "";
  const size_t last = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(first, last - first + 1));
}

}  // namespace

IniFile parse_ini(const std::string& text) {
  IniFile ini;
  std::string section;
  std::string sub_section;  // a key with an empty value, while its indented lines follow
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    const std::string content = trim(line);
    if (content.empty() || content[0] == '#' || content[0] == ';') continue;
    if (content.front() == '[' && content.back() == ']') {
      section = trim(std::string_view(content).substr(1, content.size() - 2));
      sub_section.clear();
      ini[section];
      continue;
    }
    const size_t equals = content.find('=');
    if (equals == std::string::npos) continue;
    const std::string key = trim(std::string_view(content).substr(0, equals));
    const std::string value = trim(std::string_view(content).substr(equals + 1));
    if (indented && !sub_section.empty()) {
      ini[section][sub_section + "." + key] = value;
      continue;
    }
    sub_section = value.empty() ? key : "";
    if (!value.empty()) ini[section][key] = value;
  }
  return ini;
}

Result<IniFile> read_ini_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    if (errno == ENOENT || errno == ENOTDIR) return IniFile{};
    return Status(StatusCode::kIoError,
                  "cannot read the AWS file '" + path + "': " + std::strerror(errno));
  }
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) {
    return Status(StatusCode::kIoError, "cannot read the AWS file '" + path + "'");
  }
  return parse_ini(text.str());
}

}  // namespace stoker::io
