/*
 * common/queue.h - the singly linked FIFO the layers queue their NAND ops,
 * commands and requests on: a HEAD and a TAIL pointer (both NULL: empty)
 * and, in each item, a NEXT member naming the one after it (NULL at the
 * tail).  Macros, as each queue's item type and member names are its own;
 * whoever calls them holds what guards the queue.  O(1), no allocation.
 * The arguments are evaluated more than once: pass plain names.
 */
#ifndef FLASHD_COMMON_QUEUE_H
#define FLASHD_COMMON_QUEUE_H

/* the chain FIRST .. LAST (LAST->NEXT already NULL) after the queue's tail */
#define QUEUE_SPLICE(head, tail, first, last, next)                                    \
	do {                                                                           \
		if (tail)                                                              \
			(tail)->next = (first);                                        \
		else                                                                   \
			(head) = (first);                                              \
		(tail) = (last);                                                       \
	} while (0)

/* ITEM at the queue's tail */
#define QUEUE_APPEND(head, tail, item, next)                                           \
	do {                                                                           \
		(item)->next = NULL;                                                   \
		QUEUE_SPLICE(head, tail, item, item, next);                            \
	} while (0)

#endif
