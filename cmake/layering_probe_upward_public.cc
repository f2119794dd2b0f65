// Built by ctest (layering tests): a media-layer file that includes a public header of a layer
// above it (pipeline's loader.h) must not build.
#include "stoker/loader.h"
