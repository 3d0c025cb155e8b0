/* Forwarding header: libnrt include path "nrt/nrt_experimental.h". */
#pragma once
#include "../nrt.h"
