/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_tcp.c — integration tests of the tcp data-plane transport (see transport_common.h
 * for what they show).
 */
#include <pthread.h>

#define TPT_KIND TP_TCP
#include "transport_common.h"
