// A throw-away OpenID Connect provider for the portal's sign-in tests: `oidc-provider`
// (a certified implementation, pinned in package.json) with a login page of its own.
//
//   node oidc_provider.mjs CONFIG.json
//
// CONFIG: {"port": N, "issuer": "http://127.0.0.1:N", "accounts": "ACCOUNTS.json",
//          "clients": [{"client_id", "client_secret", "redirect_uris": [...]}]}
// ACCOUNTS: {"<login>": {"password", "email", "name", "given_name", "family_name",
//            "preferred_username", "groups": [...], "userinfo_sub"?, "userinfo_fails"?,
//            "disabled"?, "revoke_all"?}}, read again at
// every sign-in, every authorization request and every user-info call, so a test changes
// someone's groups, deletes or disables them by rewriting the file. As a real provider, a
// person deleted or disabled here has no session any more: an authorization request with
// prompt=none answers login_required, and they cannot sign in.
//
// Prints "ready <issuer>" on standard output once it listens. Keys are made at start
// (RS256); the client is first-party, so there is no consent page.
//
// Refresh tokens (the portal's provider sweep, portal/auth/provider_sweep.py): a sign-in
// that asks for the `offline_access` scope gets one, as from Keycloak, Okta, Entra ID or
// Auth0 (oidc-provider on its own grants offline_access only with prompt=consent, OpenID
// Connect Core 1.0 section 11, which would show a consent page at every sign-in). It does
// not end with the session here, and each use rotates it (the old one is then refused).
// The refresh_token grant looks the account up (findAccount): a person deleted or disabled
// since is refused with invalid_grant, as their grant revoked at a real provider is.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parse as parseQuery } from 'node:querystring';

import Provider, { interactionPolicy } from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const accounts = () => JSON.parse(readFileSync(config.accounts, 'utf8'));
const usable = (login) => {
  const account = accounts()[login];
  return account && !account.disabled ? account : undefined;
};

// The login prompt also when the session's account was deleted or disabled since.
const policy = interactionPolicy.base();
policy.get('login').checks.add(new interactionPolicy.Check(
  'account_gone', 'the account was deleted or disabled', 'login_required',
  (ctx) => Boolean(ctx.oidc.session.accountId && !usable(ctx.oidc.session.accountId)),
));

// Whether the grant of an authorization code includes offline_access (loadExistingGrant).
async function offline(ctx, code) {
  if (code.scopes.has('offline_access')) return true;
  const grant = code.grantId ? await ctx.oidc.provider.Grant.find(code.grantId) : undefined;
  return Boolean(grant && (grant.getOIDCScope() || '').split(' ').includes('offline_access'));
}

// The grants of each account (loadExistingGrant), for `revoke_all` (revokeGrantPolicy).
const grantsOf = new Map();

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: 'test-key', use: 'sig', alg: 'RS256' };
const CLAIMS = ['email', 'name', 'given_name', 'family_name', 'preferred_username', 'groups'];

const provider = new Provider(config.issuer, {
  clients: config.clients.map((c) => ({
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
    ...c,
  })),
  jwks: { keys: [jwk] },
  cookies: {
    keys: [randomBytes(32).toString('hex')],
    long: { signed: true, sameSite: 'lax' },
    short: { signed: true, sameSite: 'lax' },
  },
  claims: {
    openid: ['sub'],
    email: ['email'],
    profile: ['name', 'given_name', 'family_name', 'preferred_username'],
    groups: ['groups'],
  },
  scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
  // Token revocation (RFC 7009, published in discovery as revocation_endpoint): revoking a
  // refresh token revokes its grant's tokens (a grant per session here), as RFC 7009 2.1 lets
  // a provider do (portal/auth/revocation.py).
  features: { devInteractions: { enabled: false }, revocation: { enabled: true } },
  interactions: { policy, url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, sub) {
    const account = usable(sub);
    if (!account) return undefined;
    return {
      accountId: sub,
      async claims(use) {
        const now = usable(sub) || {};
        // `userinfo_fails`: the user info endpoint answers a 500 (server_error) for this
        // person, as a provider whose user store is down does (a test).
        if (use === 'userinfo' && now.userinfo_fails) throw new Error('user store unavailable');
        // `userinfo_sub`: a user info naming another subject than the ID token (a test).
        const out = { sub: use === 'userinfo' && now.userinfo_sub ? now.userinfo_sub : sub };
        for (const claim of CLAIMS) if (claim in now) out[claim] = now[claim];
        return out;
      },
    };
  },
  // First-party client: every scope and claim asked for is granted without a consent page.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId
      || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    const grant = grantId
      ? await ctx.oidc.provider.Grant.find(grantId)
      : new ctx.oidc.provider.Grant({
        clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId,
      });
    grant.addOIDCScope(ctx.oidc.params.scope || 'openid');
    if (ctx.oidc.params.offline_asked) grant.addOIDCScope('offline_access');
    grant.addOIDCClaims(CLAIMS);
    await grant.save();
    const grants = grantsOf.get(grant.accountId) || new Set();
    grantsOf.set(grant.accountId, grants.add(grant.jti));
    return grant;
  },
  // `revoke_all`: revoking one of the person's refresh tokens revokes every token of theirs
  // for the client, of every grant (session), as a provider may (RFC 7009 2.1 lets it revoke
  // more than the token): portal/auth/revocation.py must not lose the new token to it.
  async revokeGrantPolicy(ctx) {
    const token = ctx.oidc.entities.RefreshToken;
    if (token && usable(token.accountId)?.revoke_all) {
      for (const grantId of grantsOf.get(token.accountId) || []) {
        await ctx.oidc.provider.AccessToken.revokeByGrantId(grantId);
        await ctx.oidc.provider.RefreshToken.revokeByGrantId(grantId);
      }
    }
    return true;
  },
  // A refresh token for a sign-in that asked for offline_access (above), kept past the
  // session's end; rotated at each use.
  async issueRefreshToken(ctx, client, code) {
    return client.grantTypeAllowed('refresh_token') && offline(ctx, code);
  },
  async expiresWithSession(ctx, code) {
    return !(await offline(ctx, code));
  },
  rotateRefreshToken: true,
  // oidc-provider drops offline_access from a request without prompt=consent: this
  // parameter remembers, through the login interaction, that the request asked for it.
  extraParams: {
    async offline_asked(ctx) {
      const scope = ctx.method === 'POST' ? ctx.request.body?.scope : ctx.query?.scope;
      if (String(scope || '').split(' ').includes('offline_access')) {
        ctx.oidc.params.offline_asked = 'yes';
      }
    },
  },
  pkce: { methods: ['S256'], required: () => true },
  ttl: {
    Session: 3600, Interaction: 600, Grant: 86400, AccessToken: 600, IdToken: 600,
    RefreshToken: 86400,
  },
});

// The session (`sid`) in every ID token, as Keycloak and Auth0 send it (oidc-provider does
// only for a client registered for back-channel logout, or asked with the claims
// parameter): the portal revokes a replaced refresh token only when it is of another session
// (portal/auth/revocation.py).
provider.Client.prototype.includeSid = () => true;

const escape = (s) => String(s).replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);

function page(uid, error) {
  return `<!doctype html><html><head><meta charset="utf-8"><title>Example Corp sign-in</title></head>
<body><h1>Example Corp sign-in</h1>${error ? `<p role="alert">${escape(error)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}">
<label for="login">Corporate login</label><input id="login" name="login" autocomplete="username" autofocus>
<label for="password">Corporate password</label><input id="password" name="password" type="password">
<button type="submit">Continue</button></form></body></html>`;
}

async function interaction(req, res, uid) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid || details.prompt.name !== 'login') {
    res.writeHead(400, { 'content-type': 'text/plain' }).end(`unexpected prompt ${details.prompt.name}`);
    return;
  }
  if (req.method === 'GET') {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(page(uid));
    return;
  }
  let body = '';
  for await (const chunk of req) body += chunk;
  const form = parseQuery(body);
  const account = usable(form.login);
  if (!account || account.password !== form.password) {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
      .end(page(uid, 'Wrong login or password.'));
    return;
  }
  await provider.interactionFinished(req, res, { login: { accountId: form.login } }, {
    mergeWithLastSubmission: false,
  });
}

const callback = provider.callback();
const server = createServer((req, res) => {
  const match = /^\/interaction\/([\w-]+)$/.exec(req.url.split('?')[0]);
  if (match && (req.method === 'GET' || req.method === 'POST')) {
    interaction(req, res, match[1]).catch((err) => {
      console.error(err);
      if (!res.headersSent) res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(String(err.message || err));
    });
    return;
  }
  callback(req, res);
});
server.listen(config.port, '127.0.0.1', () => console.log(`ready ${config.issuer}`));
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => process.exit(0));
