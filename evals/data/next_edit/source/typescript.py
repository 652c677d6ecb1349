"""Hand-written next-edit cases: TypeScript (see scripts/build_curated_next_edit.py for the format)."""

CATALOG_TS = '''export interface Product {
  id: string;
  title: string;
  price: number;
}

export async function loadCatalog(baseUrl: string): Promise<Product[]> {
  const res = await fetch(`${baseUrl}/products`);
  if (!res.ok) {
    throw new Error(`catalog request failed: ${res.status}`);
  }
  const items = await res.json();
  if (!Array.isArray(items)) {
    throw new Error("catalog: expected an array");
  }
  return items.filter((p) => typeof p.price === "number");
}

export function cheapest(products: Product[]): Product | undefined {
  return products.reduce<Product | undefined>(
    (best, p) => (best === undefined || p.price < best.price ? p : best),
    undefined,
  );
}
'''

RENDER_TS = '''import type { Todo } from "./types";

export function renderTodos(el: HTMLElement, todos: Todo[]): void {
  el.innerHTML = "";
  for (const todo of todos) {
    const li = document.createElement("li");
    li.textContent = todo.title;
    li.classList.toggle("done", todo.done);
    el.appendChild(li);
  }
}

export function renderCount(el: HTMLElement, todos: Todo[]): void {
  const open = todos.filter((t) => !t.done).length;
  el.textContent = `${open} left`;
}
'''

MEMO_TS = '''export class Memo<K, V> {
  private cache = new Map<K, V>();
  private hits = 0;

  constructor(private readonly compute: (key: K) => V) {}

  get(key: K): V {
    const found = this.cache.get(key);
    if (found !== undefined) {
      this.hits++;
      return found;
    }
    const value = this.compute(key);
    this.cache.set(key, value);
    return value;
  }

  stats(): { size: number; hits: number } {
    return { size: this.cache.size, hits: this.hits };
  }
}
'''

HTTP_TS = '''export class HttpError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

export async function loadJson<T>(url: string): Promise<T> {
  const res = await fetch(url, { headers: { Accept: "application/json" } });
  if (!res.ok) {
    throw new HttpError(res.status, `GET ${url}: ${res.statusText}`);
  }
  return (await res.json()) as T;
}

export async function loadText(url: string): Promise<string> {
  const res = await fetch(url);
  return res.text();
}
'''

VALIDATE_TS = '''export interface Field {
  name: string;
  required: boolean;
  maxLength?: number;
}

export function validate(field: Field, value: string): void {
  if (field.required && value.trim() === "") {
    throw new Error(`${field.name} is required`);
  }
  if (field.maxLength !== undefined && value.length > field.maxLength) {
    const message = `${field.name} is longer than ${field.maxLength}`;
    throw new RangeError(message);
  }
}

export function validateAll(fields: Field[], values: Record<string, string>): void {
  for (const field of fields) {
    validate(field, values[field.name] ?? "");
  }
}
'''

TYPES_TS = '''export interface User {
  id: number;
  userName: string;
  email: string;
  createdAt: Date;
}

export type UserPatch = Partial<Omit<User, "id">>;

export type Role = "admin" | "member" | "guest";

export interface Team {
  id: number;
  name: string;
  members: User[];
  roles: Record<number, Role>;
}

export function isAdmin(team: Team, user: User): boolean {
  return team.roles[user.id] === "admin";
}
'''

USERS_TS = '''import type { User } from "./types";

interface RawUser {
  id: number;
  name: string;
  email: string;
  created: string;
}

export function toUser(raw: RawUser): User {
  return {
    id: raw.id,
    userName: raw.name,
    email: raw.email.toLowerCase(),
    createdAt: new Date(raw.created),
  };
}

export function byEmail(users: User[]): Map<string, User> {
  return new Map(users.map((u) => [u.email, u]));
}
'''

DATES_TS = '''export function formatDate(d: Date): string {
  return d.toLocaleDateString(undefined, {
    year: "numeric",
    month: "short",
    day: "numeric",
  });
}

export function daysBetween(a: Date, b: Date): number {
  const ms = Math.abs(b.getTime() - a.getTime());
  return Math.floor(ms / 86_400_000);
}

export function addDays(d: Date, days: number): Date {
  const out = new Date(d);
  out.setDate(out.getDate() + days);
  return out;
}
'''

ORDERS_TS = '''import { formatDate } from "./dates";

export interface Order {
  id: string;
  total: number;
  createdAt: Date;
}

export function renderOrder(order: Order, locale: string): string {
  const total = order.total.toLocaleString(locale, { style: "currency", currency: "EUR" });
  const when = formatDate(order.createdAt);
  return `#${order.id} - ${total} - ${when}`;
}

export function renderOrders(orders: Order[], locale: string): string {
  return orders.map((o) => renderOrder(o, locale)).join("\\n");
}
'''

RETRY_TS = '''export class Poller {
  private readonly url: string;
  private readonly intervalMs: number;
  private timer: ReturnType<typeof setInterval> | undefined;

  constructor(url: string, intervalMs: number) {
    this.url = url;
    this.intervalMs = intervalMs;
  }

  start(onData: (body: string) => void): void {
    this.timer = setInterval(async () => {
      const res = await fetch(this.url);
      onData(await res.text());
    }, this.intervalMs);
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
'''

FORM_TS = '''export function readSignupForm(): { name: string; email: string; password: string; terms: boolean } {
  const name = document.getElementById("name") as HTMLInputElement;
  const email = document.getElementById("email") as HTMLInputElement;
  const password = document.getElementById("password") as HTMLInputElement;
  const terms = document.getElementById("terms") as HTMLInputElement;
  return {
    name: name.value.trim(),
    email: email.value.trim(),
    password: password.value,
    terms: terms.checked,
  };
}

export function clearSignupForm(form: HTMLFormElement): void {
  form.reset();
}
'''

SELECTORS_TS = '''export interface State {
  user: { name: string; email: string; avatarUrl: string | null };
  cart: { items: { sku: string; qty: number }[] };
}

export const selectUserName = (s: State) => s.user.name;

export const selectCartCount = (s: State) =>
  s.cart.items.reduce((n, item) => n + item.qty, 0);

export const selectIsEmpty = (s: State) => s.cart.items.length === 0;

export const selectAvatar = (s: State) => s.user.avatarUrl ?? "/img/default.png";

export const selectSkus = (s: State) => s.cart.items.map((item) => item.sku);
'''

SYNC_TS = '''import { api } from "./api";

export async function syncCart(cartId: string, items: string[]): Promise<number> {
  const response = await api.put(`/carts/${cartId}`, { items });
  if (response.status !== 200) {
    throw new Error(`sync failed with ${response.status}`);
  }
  return items.length;
}

export async function clearCart(cartId: string): Promise<void> {
  await api.delete(`/carts/${cartId}`);
}

export async function fetchCart(cartId: string): Promise<string[]> {
  const response = await api.get(`/carts/${cartId}`);
  return response.data.items;
}
'''

SESSION_TS = '''const STORAGE_KEY = "user";

export interface SessionUser {
  id: string;
  name: string;
}

export function saveUser(user: SessionUser): void {
  localStorage.setItem(STORAGE_KEY, JSON.stringify(user));
}

export function loadUser(): SessionUser | null {
  const user = localStorage.getItem("user");
  return user ? (JSON.parse(user) as SessionUser) : null;
}

export function clearUser(): void {
  localStorage.removeItem(STORAGE_KEY);
}
'''

PAGING_TS = '''export const PAGE_SIZE = 20;

export interface Page<T> {
  items: T[];
  page: number;
  pages: number;
}

export function paginate<T>(all: T[], page: number): Page<T> {
  const pages = Math.max(1, Math.ceil(all.length / PAGE_SIZE));
  const current = Math.min(Math.max(page, 1), pages);
  const start = (current - 1) * PAGE_SIZE;
  return { items: all.slice(start, start + PAGE_SIZE), page: current, pages };
}

export function pageNumbers(pages: number): number[] {
  return Array.from({ length: pages }, (_, i) => i + 1);
}
'''

CASES = [
    {
        "id": "ts-below-rename-const",
        "category": "next-edit/below",
        "language": "typescript",
        "files_before": {"catalog.ts": CATALOG_TS},
        "steps": [{"path": "catalog.ts", "old": "  const items = await res.json();", "new": "  const products = await res.json();"}],
        "cursor": {"path": "catalog.ts", "after": "  const products"},
        "expected": [
            {"path": "catalog.ts", "old": "Array.isArray(items)", "new": "Array.isArray(products)"},
            {"path": "catalog.ts", "old": "return items.filter(", "new": "return products.filter("},
        ],
        "note": "items renamed to products; its remaining uses, the Array.isArray check and the filter in the "
                "return, are both in the region",
    },
    {
        "id": "ts-below-rename-param",
        "category": "next-edit/below",
        "language": "typescript",
        "files_before": {"render.ts": RENDER_TS},
        "steps": [{"path": "render.ts", "old": "export function renderTodos(el: HTMLElement",
                   "new": "export function renderTodos(list: HTMLElement"}],
        "cursor": {"path": "render.ts", "after": "renderTodos(list"},
        "expected": [
            {"path": "render.ts", "old": '  el.innerHTML = "";', "new": '  list.innerHTML = "";'},
            {"path": "render.ts", "old": "el.appendChild(li)", "new": "list.appendChild(li)"},
        ],
        "note": "parameter el -> list in renderTodos; its remaining uses (innerHTML, appendChild) are in the "
                "region; renderCount's el is its own parameter",
    },
    {
        "id": "ts-below-rename-property",
        "category": "next-edit/below",
        "language": "typescript",
        "files_before": {"memo.ts": MEMO_TS},
        "steps": [{"path": "memo.ts", "old": "  private cache = new Map<K, V>();", "new": "  private entries = new Map<K, V>();"}],
        "cursor": {"path": "memo.ts", "after": "  private entries"},
        "expected": {"path": "memo.ts", "old": "this.cache.get(key)", "new": "this.entries.get(key)"},
        "note": "the private field cache renamed to entries; the first this.cache below is in get(), six lines "
                "down (set and size follow)",
    },
    {
        "id": "ts-above-param-signal",
        "category": "next-edit/above",
        "language": "typescript",
        "files_before": {"http.ts": HTTP_TS},
        "steps": [{"path": "http.ts", "old": '{ headers: { Accept: "application/json" } }',
                   "new": '{ headers: { Accept: "application/json" }, signal }'}],
        "expected": {"path": "http.ts", "old": "export async function loadJson<T>(url: string): Promise<T> {",
                     "new": "export async function loadJson<T>(url: string, signal?: AbortSignal): Promise<T> {"},
        "note": "fetch now gets signal, which loadJson does not take: the signature one line above gains an "
                "optional AbortSignal parameter",
    },
    {
        "id": "ts-above-rename-at-throw",
        "category": "next-edit/above",
        "language": "typescript",
        "files_before": {"validate.ts": VALIDATE_TS},
        "steps": [{"path": "validate.ts", "old": "throw new RangeError(message);", "new": "throw new RangeError(detail);"}],
        "cursor": {"path": "validate.ts", "after": "RangeError(detail"},
        "expected": {"path": "validate.ts", "old": "    const message = `${field.name} is longer",
                     "new": "    const detail = `${field.name} is longer"},
        "note": "renamed at the use; no use below, the declaration one line above still says message",
    },
    {
        "id": "ts-jump-field-rename-initialiser",
        "category": "next-edit/jump",
        "language": "typescript",
        "files_before": {"types.ts": TYPES_TS, "users.ts": USERS_TS},
        "steps": [{"path": "types.ts", "old": "  userName: string;", "new": "  username: string;"}],
        "cursor": {"path": "types.ts", "after": "  username"},
        "expected": {"path": "users.ts", "old": "    userName: raw.name,", "new": "    username: raw.name,"},
        "note": "interface field renamed; the object literal that builds a User in users.ts still sets userName "
                "(a type error now)",
    },
    {
        "id": "ts-jump-signature-call-site",
        "category": "next-edit/jump",
        "language": "typescript",
        "files_before": {"dates.ts": DATES_TS, "orders.ts": ORDERS_TS},
        "steps": [
            {"path": "dates.ts", "old": "export function formatDate(d: Date): string {",
             "new": "export function formatDate(d: Date, locale: string): string {"},
            {"path": "dates.ts", "old": "d.toLocaleDateString(undefined, {", "new": "d.toLocaleDateString(locale, {"},
        ],
        "expected": {"path": "orders.ts", "old": "formatDate(order.createdAt)", "new": "formatDate(order.createdAt, locale)"},
        "note": "formatDate takes a required locale now; its caller in orders.ts has locale in scope",
    },
    {
        "id": "ts-complete-field-assign",
        "category": "next-edit/complete",
        "language": "typescript",
        "files_before": {"poller.ts": RETRY_TS},
        "steps": [
            {"path": "poller.ts", "old": "  private readonly intervalMs: number;\n",
             "new": "  private readonly intervalMs: number;\n  private readonly maxFailures: number;\n"},
            {"path": "poller.ts", "old": "constructor(url: string, intervalMs: number)",
             "new": "constructor(url: string, intervalMs: number, maxFailures: number)"},
        ],
        "cursor": {"path": "poller.ts", "after": "intervalMs: number, maxFailures: number"},
        "expected": {"path": "poller.ts", "old": "    this.intervalMs = intervalMs;\n",
                     "new": "    this.intervalMs = intervalMs;\n    this.maxFailures = maxFailures;\n"},
        "note": "a readonly field and its constructor parameter added; the assignment in the constructor body "
                "is missing (the compiler requires it)",
    },
    {
        "id": "ts-complete-query-selector-pattern",
        "category": "next-edit/complete",
        "language": "typescript",
        "files_before": {"form.ts": FORM_TS},
        "steps": [
            {"path": "form.ts", "old": 'const name = document.getElementById("name") as HTMLInputElement;',
             "new": 'const name = document.querySelector<HTMLInputElement>("#name")!;'},
            {"path": "form.ts", "old": 'const email = document.getElementById("email") as HTMLInputElement;',
             "new": 'const email = document.querySelector<HTMLInputElement>("#email")!;'},
        ],
        "expected": [
            {"path": "form.ts", "old": 'const password = document.getElementById("password") as HTMLInputElement;',
             "new": 'const password = document.querySelector<HTMLInputElement>("#password")!;'},
            {"path": "form.ts", "old": 'const terms = document.getElementById("terms") as HTMLInputElement;',
             "new": 'const terms = document.querySelector<HTMLInputElement>("#terms")!;'},
        ],
        "note": "two of four getElementById casts converted to querySelector<HTMLInputElement>; the other two "
                "(password, terms) are the next lines",
    },
    {
        "id": "ts-complete-pasted-selector",
        "category": "next-edit/complete",
        "language": "typescript",
        "files_before": {"selectors.ts": SELECTORS_TS},
        "steps": [
            {"path": "selectors.ts", "old": "export const selectUserName = (s: State) => s.user.name;\n",
             "new": "export const selectUserName = (s: State) => s.user.name;\n"
                    "export const selectUserName = (s: State) => s.user.name;\n"},
            {"path": "selectors.ts", "old": "export const selectUserName", "new": "export const selectUserEmail",
             "occurrence": 2},
        ],
        "cursor": {"path": "selectors.ts", "after": "export const selectUserEmail"},
        "expected": {"path": "selectors.ts", "old": "selectUserEmail = (s: State) => s.user.name;",
                     "new": "selectUserEmail = (s: State) => s.user.email;"},
        "note": "a selector line duplicated and renamed selectUserEmail; it still returns s.user.name",
    },
    {
        "id": "ts-noise-log-line",
        "category": "no-edit/noise",
        "language": "typescript",
        "files_before": {"sync.ts": SYNC_TS},
        "steps": [{"path": "sync.ts", "old": "  const response = await api.put(`/carts/${cartId}`, { items });\n",
                   "new": "  console.debug(\"syncing cart\", cartId, items.length);\n"
                          "  const response = await api.put(`/carts/${cartId}`, { items });\n"}],
        "cursor": {"path": "sync.ts", "after": "items.length);"},
        "expected": None,
        "note": "a debug log line added; nothing else depends on it",
    },
    {
        "id": "ts-noise-rename-keeps-string-key",
        "category": "no-edit/noise",
        "language": "typescript",
        "files_before": {"session.ts": SESSION_TS},
        "steps": [
            {"path": "session.ts", "old": '  const user = localStorage.getItem("user");',
             "new": '  const stored = localStorage.getItem("user");'},
            {"path": "session.ts", "old": "  return user ? (JSON.parse(user) as SessionUser) : null;",
             "new": "  return stored ? (JSON.parse(stored) as SessionUser) : null;"},
        ],
        "cursor": {"path": "session.ts", "after": ": null;"},
        "expected": None,
        "note": "loadUser's local user renamed to stored at both uses; the storage key \"user\" and saveUser's "
                "user parameter keep the old word legitimately",
    },
    {
        "id": "ts-noise-page-size-literal",
        "category": "no-edit/noise",
        "language": "typescript",
        "files_before": {"paging.ts": PAGING_TS},
        "steps": [{"path": "paging.ts", "old": "export const PAGE_SIZE = 20;", "new": "export const PAGE_SIZE = 50;"}],
        "expected": None,
        "note": "a constant's value changed; every use reads the constant",
    },
]
