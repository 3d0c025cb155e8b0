/* Forwarding header: libnrt include path "nrt/nrt_version.h". */
#pragma once
#include "../nrt.h"
