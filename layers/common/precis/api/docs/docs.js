// Swagger UI over the document this API serves. Nothing else is contacted: no validator badge (it would send the
// document to validator.swagger.io), no other origin. "Try it out" sends requests to this origin, with the key given
// under "Authorize" (kept in the page only, not in storage).
"use strict";

window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
  persistAuthorization: false,
  tryItOutEnabled: false,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
