// resolve_remote_options(): RemoteOptions filled in from the environment the way the AWS CLI
// and SDKs do (stoker/remote_source.h says the order).
#include "io/remote/remote_options.h"

#include <cstdlib>
#include <string>

#include "io/remote/aws_shared_files.h"
#include "stoker/remote_source.h"

namespace stoker {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::string shared_file(const char* variable, const char* name) {
  std::string path = env(variable);
  if (!path.empty()) return path;
  const std::string home = env("HOME");
  return (home.empty() ? std::string(".") : home) + "/.aws/" + name;
}

const std::string* lookup(const io::IniFile& ini, const std::string& section,
                          const std::string& key) {
  const auto found = ini.find(section);
  if (found == ini.end()) return nullptr;
  const auto value = found->second.find(key);
  return value == found->second.end() ? nullptr : &value->second;
}

template <typename T>
void default_if_unset(T& field, T unset, T fallback) {
  if (field == unset) field = fallback;
}

}  // namespace

Result<RemoteOptions> resolve_remote_options(const RemoteOptions& options) {
  RemoteOptions r = options;
  const bool profile_given = !options.profile.empty();
  const std::string named = profile_given ? options.profile : env("AWS_PROFILE");
  const std::string profile = named.empty() ? "default" : named;
  r.profile = profile;

  STOKER_ASSIGN_OR_RETURN(
      const io::IniFile credentials,
      io::read_ini_file(shared_file("AWS_SHARED_CREDENTIALS_FILE", "credentials")));
  STOKER_ASSIGN_OR_RETURN(const io::IniFile config,
                          io::read_ini_file(shared_file("AWS_CONFIG_FILE", "config")));
  const std::string config_section = profile == "default" ? "default" : "profile " + profile;
  const bool in_credentials = credentials.count(profile) != 0;
  const bool in_config = config.count(config_section) != 0;
  if (!named.empty() && profile != "default" && !in_credentials && !in_config) {
    return Status(StatusCode::kNotFound,
                  "the AWS profile '" + profile + "' is in neither " +
                      shared_file("AWS_SHARED_CREDENTIALS_FILE", "credentials") + " nor " +
                      shared_file("AWS_CONFIG_FILE", "config"));
  }
  // A profile key: the credentials file first, then the config file.
  auto from_profile = [&](const std::string& key) -> std::string {
    if (const std::string* v = lookup(credentials, profile, key)) return *v;
    if (const std::string* v = lookup(config, config_section, key)) return *v;
    return "";
  };

  if (r.access_key_id.empty() && !r.anonymous) {
    // As the AWS CLI: a profile named in the call beats the environment's keys, which beat a
    // profile named by AWS_PROFILE (or the default one).
    const std::string env_key = env("AWS_ACCESS_KEY_ID");
    const std::string env_secret = env("AWS_SECRET_ACCESS_KEY");
    const std::string profile_key = from_profile("aws_access_key_id");
    const bool use_env =
        !env_key.empty() && !env_secret.empty() && !(profile_given && !profile_key.empty());
    // A field given explicitly (a secret alone, say) is kept: only the empty ones are filled.
    if (use_env) {
      r.access_key_id = env_key;
      if (r.secret_access_key.empty()) r.secret_access_key = env_secret;
      if (r.session_token.empty()) r.session_token = env("AWS_SESSION_TOKEN");
    } else if (!profile_key.empty()) {
      r.access_key_id = profile_key;
      if (r.secret_access_key.empty()) r.secret_access_key = from_profile("aws_secret_access_key");
      if (r.session_token.empty()) r.session_token = from_profile("aws_session_token");
    }
  }
  if (r.region.empty()) r.region = env("AWS_REGION");
  if (r.region.empty()) r.region = env("AWS_DEFAULT_REGION");
  if (r.region.empty()) r.region = from_profile("region");
  if (r.region.empty()) r.region = "us-east-1";
  if (r.endpoint_url.empty()) r.endpoint_url = env("AWS_ENDPOINT_URL_S3");
  if (r.endpoint_url.empty()) r.endpoint_url = env("AWS_ENDPOINT_URL");
  if (r.endpoint_url.empty()) r.endpoint_url = from_profile("s3.endpoint_url");
  if (r.endpoint_url.empty()) r.endpoint_url = from_profile("endpoint_url");

  return io::with_default_limits(std::move(r));
}

namespace io {

RemoteOptions with_default_limits(RemoteOptions r) {
  default_if_unset(r.max_attempts, 0, 8);
  default_if_unset(r.total_timeout_s, 0.0, 120.0);
  default_if_unset(r.connect_timeout_s, 0.0, 10.0);
  default_if_unset(r.low_speed_timeout_s, 0.0, 15.0);
  default_if_unset(r.backoff_base_s, 0.0, 0.05);
  default_if_unset(r.backoff_max_s, 0.0, 5.0);
  if (r.read_through_gap_bytes < 0) r.read_through_gap_bytes = int64_t{64} << 10;
  default_if_unset(r.min_request_bytes, int64_t{0}, int64_t{256} << 10);
  return r;
}

}  // namespace io
}  // namespace stoker
