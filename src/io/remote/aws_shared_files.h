// The AWS shared configuration files, ~/.aws/credentials and ~/.aws/config: INI files of
// `[section]` headers and `key = value` lines (# and ; start comments). The credentials file
// names a profile `[name]`, the config file `[profile name]` (but `[default]`). A key with an
// empty value opens a sub-section of the indented lines after it (`s3 =` then
// `  endpoint_url = ...`), read here as "s3.endpoint_url".
//
// Thread-safety: pure functions (they read files).
#pragma once

#include <map>
#include <string>

#include "stoker/status.h"

namespace stoker::io {

/// section name -> key -> value.
using IniFile = std::map<std::string, std::map<std::string, std::string>>;

/// Parses INI text.
IniFile parse_ini(const std::string& text);

/// Reads and parses the file at `path`; an absent file reads as empty. Errors: kIoError when
/// the file exists but cannot be read (the message names it).
Result<IniFile> read_ini_file(const std::string& path);

}  // namespace stoker::io
