/* Forwarding header: libnrt include path "nrt/nrt_status.h". */
#pragma once
#include "../nrt.h"
