// Built by ctest (layering tests): a media-layer file that includes a private header of a
// layer above it (pipeline) must not build.
#include "pipeline/executor.h"
